"""promote: copy a digest through relay registries, each hop verified, with evidence."""

from imagekit.promote.copy import HopNotVerified, HopRecord, Promoter, PromoteResult, promote
from imagekit.promote.run import promotion_gate, run_promote

__all__ = ["HopNotVerified", "HopRecord", "PromoteResult", "Promoter", "promote", "promotion_gate",
           "run_promote"]
