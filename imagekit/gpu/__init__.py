"""GPU preflight records: the pydantic model of the GPU preflight's JSON and how it
becomes evidence. The script itself stays torch-only; this side never imports torch."""

from imagekit.gpu.evidence import RecordedPreflight, record_preflight
from imagekit.gpu.record import (
    SCHEMA,
    BandwidthRow,
    PreflightRecord,
    busbw_factor,
    load_record,
)

__all__ = [
    "SCHEMA",
    "BandwidthRow",
    "PreflightRecord",
    "RecordedPreflight",
    "busbw_factor",
    "load_record",
    "record_preflight",
]
