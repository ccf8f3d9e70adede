"""Write a validated GPU preflight record into the evidence store.

The raw JSON file goes in byte for byte (what the GPUs' node printed is the evidence); the checks
it carries become the attempt's checks, so `imagekit evidence list` shows the verdict without
re-reading the file. A run log, when given, is kept beside it.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from imagekit.errors import InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import BandwidthSample, GpuPreflightResult
from imagekit.gpu.record import PreflightRecord, load_record, timed_verdicts
from imagekit.oci import Digest
from imagekit.results import CheckResult, Status

KIND = "gpu-preflight"


class RecordedPreflight(BaseModel):
    """What `gpu-record` did: the parsed record, where its evidence lies, under which key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record: PreflightRecord
    key: str
    evidence: str
    status: Status


def default_name(record: PreflightRecord) -> str:
    host = record.software.hostname if record.software else socket.gethostname()
    return "gpu-preflight-" + (re.sub(r"[^A-Za-z0-9._-]", "-", host).strip("-.") or "host")


def record_preflight(path: Path, store: EvidenceStore, *, digest: Digest | None = None,
                     name: str | None = None, log: Path | None = None) -> RecordedPreflight:
    """Validate `path` and add one attempt of kind `gpu-preflight`; nothing is overwritten."""
    record = load_record(path)
    raw = path.read_bytes()
    try:
        log_bytes = log.read_bytes() if log is not None else None
    except OSError as exc:
        raise InvalidInput(f"cannot read the run log: {exc.strerror}", where=str(log)) from None
    subject: Digest | str = digest if digest is not None else (name or default_name(record))
    context: dict[str, Any] = {
        "source": str(path.absolute()), "world_size": record.world_size,
        "backend": record.backend, "gpus": record.gpu_names,
        "hostname": record.software.hostname if record.software else None}
    with store.attempt(subject, KIND, **context) as attempt:
        attempt.write_bytes("preflight.json", raw)
        if log_bytes is not None:
            attempt.write_bytes("preflight.log", log_bytes)
        attempt.write_result(GpuPreflightResult(
            world_size=record.world_size, backend=record.backend, gpus=list(record.gpu_names),
            hostname=context["hostname"],
            sizes=[BandwidthSample(bytes=row.bytes, algbw_GBps=row.algbw_GBps,
                                   busbw_GBps=row.busbw_GBps)
                   for row in (record.bandwidth.sizes if record.bandwidth else [])],
            timed=timed_verdicts(record)))
        checks = list(record.checks) or [CheckResult(
            name="preflight", status=record.status, detail=record.error or "")]
        for check in checks:
            attempt.add_check(check)
        attempt.finish(status=record.status, summary=summary_line(record))
        location = str(attempt.path)
        key = str(attempt.key)
    return RecordedPreflight(record=record, key=key, evidence=location, status=record.status)


def summary_line(record: PreflightRecord) -> str:
    if record.world_size is None:
        return f"{record.status}: {record.error}"
    parts = [f"{record.status}", f"{record.world_size}x {', '.join(record.gpu_names)}",
             f"backend {record.backend}"]
    if record.matmul is not None:
        parts.append(f"bf16 {record.matmul.min_tflops:.4g} TFLOP/s")
    peak = record.peak
    if peak is not None:
        parts.append(f"peak busbw {peak.busbw_GBps:.1f} GB/s, algbw {peak.algbw_GBps:.1f} GB/s "
                     f"at {peak.bytes} B")
    return "; ".join(parts)
