"""Export the JSON Schema of every record model, and check the checked-in ones are current.

The models are named by dotted path in `MODELS` (the one list to extend when a record model is
added); a path whose module does not exist is an error, not a skip, so a rename is noticed. The
file of a model is `<ClassName>.json`; names must be unique across the list.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from pydantic import BaseModel

from imagekit.errors import InvalidInput

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = Path(__file__).resolve().parent

MODELS: tuple[str, ...] = (
    # results and evidence
    "imagekit.results.CheckResult",
    "imagekit.results.CheckReport",
    # progress of long steps: the JSON lines on stderr of --json
    "imagekit.progress.ProgressEvent",
    "imagekit.evidence.store.AttemptRecord",
    "imagekit.evidence.store.FileEntry",
    "imagekit.evidence.store.EvidenceKey",
    "imagekit.evidence.contract.Subject",
    # one result model per evidence kind (imagekit.evidence.kinds; docs/design/evidence.md)
    "imagekit.evidence.kinds.BuildResult",
    "imagekit.evidence.kinds.RebuildResult",
    "imagekit.evidence.kinds.ProbeResult",
    "imagekit.evidence.kinds.ImagesVerifyResult",
    "imagekit.evidence.kinds.ImagesManifestResult",
    "imagekit.evidence.kinds.VerifyCopyEvidence",
    "imagekit.evidence.kinds.PromoteEvidence",
    "imagekit.evidence.kinds.ReleaseResult",
    "imagekit.evidence.kinds.ClusterProbeResult",
    "imagekit.evidence.kinds.GpuPreflightResult",
    "imagekit.evidence.kinds.GpuJobResult",
    "imagekit.evidence.kinds.EngineStartupResult",
    "imagekit.evidence.kinds.AcceptResult",
    "imagekit.evidence.kinds.BenchResult",
    "imagekit.evidence.kinds.ClusterAcceptResult",
    "imagekit.evidence.kinds.RehearsalResult",
    "imagekit.evidence.kinds.ReportResult",
    "imagekit.evidence.kinds.GateOverrideResult",
    "imagekit.evidence.kinds.StandinRootfsResult",
    "imagekit.evidence.kinds.StandinBuildResult",
    "imagekit.evidence.kinds.SbomResult",
    "imagekit.evidence.kinds.AttestedResult",
    # the trust policy: whose signed statements count
    "imagekit.trust.policy.TrustedKey",
    "imagekit.trust.policy.PolicyFile",
    # OCI nouns
    "imagekit.oci.descriptor.Descriptor",
    "imagekit.oci.platform.Platform",
    "imagekit.oci.manifest.ImageManifest",
    "imagekit.oci.manifest.ImageIndex",
    "imagekit.oci.manifest.ImageConfig",
    # report and gate
    "imagekit.report.models.ImageReport",
    "imagekit.report.models.GateDecision",
    "imagekit.report.models.EvidenceLine",
    "imagekit.report.models.Decision",
    "imagekit.report.models.RequiredOutcome",
    "imagekit.report.models.EndpointDigest",
    "imagekit.report.models.PreviousBuild",
    "imagekit.report.models.PreflightSummary",
    "imagekit.report.models.LatencySeries",
    "imagekit.report.models.ImageFacts",
    "imagekit.report.models.OverrideRecord",
    "imagekit.report.accepted.Accepted",
    "imagekit.report.batch.SpecReport",
    # the images spec, its lock, builds and the image manifest
    "imagekit.spec.models.ImagesSpec",
    "imagekit.spec.models.ResolvedImage",
    "imagekit.spec.lock.LockFile",
    "imagekit.spec.starter.StarterResult",
    "imagekit.build.records.BuildRecord",
    "imagekit.build.pin.PinLine",
    "imagekit.standins.build.StandinRecord",
    "imagekit.probe.runner.ProbeReport",
    "imagekit.imagesverify.models.ImageEntry",
    "imagekit.imagesverify.models.ImagesVerifyReport",
    # registry operations
    "imagekit.verify.copy.VerifyCopyResult",
    "imagekit.promote.copy.PromoteResult",
    # attestations
    "imagekit.attest.models.PromotionPredicate",
    "imagekit.attest.models.Attached",
    "imagekit.attest.models.AttestVerifyReport",
    # the cluster phases each actor signs
    "imagekit.attest.phase.ClusterPhasePredicate",
    "imagekit.sbom.bom.SbomDiff",
    # GPU preflight
    "imagekit.gpu.record.PreflightRecord",
    "imagekit.gpu.evidence.RecordedPreflight",
    # acceptance
    "imagekit.acceptance.models.Exchange",
    "imagekit.acceptance.models.Sample",
    "imagekit.acceptance.models.RoundResult",
    "imagekit.acceptance.matrix.Matrix",
    "imagekit.acceptance.engines.EngineConfig",
    "imagekit.acceptance.capabilities.Capabilities",
    # cluster and launch
    "imagekit.cluster.precheck.PodIntent",
    "imagekit.launch.command.ServeConfig",
    "imagekit.launch.budget.ProbeBudget",
    "imagekit.launch.startup_log.StartupReport",
    # `imagekit doctor --json`: what a role needs, checked before it starts
    "imagekit.doctor.models.DoctorReport",
    # local infrastructure state
    "imagekit.infra.state.InfraState",
    "imagekit.infra.state.ComponentStatus",
    "imagekit.infra.processes.TrackedProcess",
    "imagekit.infra.token_service.TokenServiceConfig",
)


def load_model(path: str) -> type[BaseModel]:
    module_name, _, class_name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"schema model module cannot be imported: {exc}", where=path) from None
    model = getattr(module, class_name, None)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise InvalidInput("not a pydantic model", where=path)
    return model


def schema_of(path: str) -> dict:
    model = load_model(path)
    schema = model.model_json_schema(mode="validation")
    return {"$schema": SCHEMA_DIALECT, "$id": f"urn:imagekit:schema:{path}", **schema}


def file_name(path: str) -> str:
    return path.rpartition(".")[2] + ".json"


def render_all(models: tuple[str, ...] = MODELS) -> dict[str, str]:
    """{file name: exact file text} for every model."""
    names = [file_name(p) for p in models]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidInput(f"two models would share a schema file: {', '.join(duplicates)}")
    return {file_name(p): json.dumps(schema_of(p), indent=2, sort_keys=True) + "\n"
            for p in models}


def export(directory: Path | str = SCHEMA_DIR, models: tuple[str, ...] = MODELS) -> list[Path]:
    """Write every schema; remove schema files of models no longer listed. Returns the paths."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    rendered = render_all(models)
    for stale in directory.glob("*.json"):
        if stale.name not in rendered:
            stale.unlink()
    written = []
    for name, text in rendered.items():
        target = directory / name
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
        written.append(target)
    return written


def check(directory: Path | str = SCHEMA_DIR, models: tuple[str, ...] = MODELS) -> list[str]:
    """Differences between the checked-in schemas and the models now; empty when current."""
    directory = Path(directory)
    rendered = render_all(models)
    problems = []
    for name, text in rendered.items():
        target = directory / name
        if not target.exists():
            problems.append(f"{name}: missing")
        elif target.read_text() != text:
            problems.append(f"{name}: differs from the model")
    for extra in sorted(directory.glob("*.json")):
        if extra.name not in rendered:
            problems.append(f"{extra.name}: no model lists it")
    return problems
