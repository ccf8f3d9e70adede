"""Release evidence: the image report (md/json/junit/in-toto/html) and the promotion gate."""

from imagekit.report.collect import build_report
from imagekit.report.gate import check_promotable, decide, enforce, record_override
from imagekit.report.models import (
    BandwidthPoint,
    EndpointDigest,
    EvidenceLine,
    GateDecision,
    ImageFacts,
    ImageReport,
    LatencySeries,
    OverrideRecord,
    PreflightSummary,
    RequiredOutcome,
)
from imagekit.report.render import FORMATS, render
from imagekit.report.required import DEFAULT_REQUIRED, REQUIRED_ENV, parse_requirements

__all__ = [
    "DEFAULT_REQUIRED", "FORMATS", "REQUIRED_ENV", "BandwidthPoint", "EndpointDigest",
    "EvidenceLine", "GateDecision", "ImageFacts", "ImageReport", "LatencySeries",
    "OverrideRecord", "PreflightSummary", "RequiredOutcome", "build_report", "check_promotable",
    "decide", "enforce", "parse_requirements", "record_override", "render",
]
