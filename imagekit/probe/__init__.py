"""Probes run inside images (`probes/*.py`), results as CheckResults."""

from imagekit.probe.runner import (
    ProbePlan,
    ProbeReport,
    parse_outcome,
    probe_image,
    probes_dir,
    probes_version,
    run_probes,
)

__all__ = ["ProbePlan", "ProbeReport", "parse_outcome", "probe_image", "probes_dir",
           "probes_version", "run_probes"]
