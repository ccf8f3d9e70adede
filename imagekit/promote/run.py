"""`run_promote`: promotion with its gate and its evidence — what the CLI calls.

GATE HOOK: `promotion_gate()` is the one place promotion asks whether a digest may go out.
It imports `imagekit.report.gate` at call time (the report package is a peer operation that
may be absent in a trimmed install); when present its `enforce()` refuses a digest with FAIL or
missing evidence unless `--force --reason` is given, and records the override.
"""

from __future__ import annotations

import importlib
from typing import Any

from imagekit.errors import ImagekitError
from imagekit.evidence import EvidenceStore
from imagekit.oci import ImageReference, Platform
from imagekit.oci.digest import Digest
from imagekit.oci.platform import LINUX_AMD64
from imagekit.promote.copy import HopRecord, PromoteResult, promote
from imagekit.promote.live import LiveAttempt
from imagekit.registry import ClientPool
from imagekit.registry.interrupt import Interrupted, graceful
from imagekit.registry.progress import ProgressSink
from imagekit.results import CheckResult, Status

GATE_MODULE = "imagekit.report.gate"


def promotion_gate(store: EvidenceStore, digest: Digest, *, force: bool = False,
                   reason: str | None = None, **context: Any) -> dict:
    """Ask the evidence gate; raises (CheckFailed, exit 1) when refused and not forced."""
    try:
        gate = importlib.import_module(GATE_MODULE)
    except ImportError:
        return {"gate": "unavailable", "detail": f"{GATE_MODULE} is not installed; "
                                                 "promotion was not gated"}
    enforce = getattr(gate, "enforce", None)
    if enforce is not None:
        decision = enforce(store, digest, force=force, reason=reason, **context)
    else:  # the minimal contract: check_promotable(store, digest) -> GateDecision
        decision = gate.check_promotable(store, digest)
    data = decision.model_dump(mode="json") if hasattr(decision, "model_dump") else \
        {"allowed": bool(getattr(decision, "allowed", False))}
    data["gate"] = "checked"
    return data


def run_promote(source: ImageReference, via: list[ImageReference], to: ImageReference, *,
                store: EvidenceStore, all_platforms: bool = False,
                platform: Platform = LINUX_AMD64, options=None, progress: ProgressSink | None
                = None, gate: bool = True, force: bool = False, reason: str | None = None
                ) -> tuple[PromoteResult, str]:
    """Promote and record one `promote` attempt keyed by the promoted digest (per-hop records,
    partial ones too when a hop fails). Returns (result, evidence directory)."""
    hops: list[HopRecord] = []
    context = {"source": str(source), "via": [str(v) for v in via], "to": str(to),
               "all_platforms": all_platforms}
    pool = ClientPool(options)
    state: dict[str, Any] = {}

    def gate_fn(digest: Digest) -> dict:
        state["digest"] = digest
        if not gate:
            decision = {"gate": "skipped", "detail": "gate disabled by the caller"}
        else:
            decision = promotion_gate(store, digest, force=force, reason=reason,
                                      promoted_to=[str(v) for v in via] + [str(to)])
        state["live"] = LiveAttempt.begin(store, digest, context)  # hops kept as they land
        return decision

    def on_hop(hop: HopRecord) -> None:
        hops.append(hop)
        if "live" in state:
            state["live"].hop(hop)

    try:
        try:
            with graceful():  # SIGINT/SIGTERM: transfers stop cleanly, the upload is resumable
                result = promote(source, via, to, all_platforms=all_platforms,
                                 platform=platform, pool=pool, progress=progress, gate=gate_fn,
                                 on_hop=on_hop)
        except (ImagekitError, KeyboardInterrupt) as exc:
            if "live" in state:
                state["live"].discard()
            if "digest" in state:
                if not isinstance(exc, ImagekitError):
                    exc = Interrupted("interrupted", where=str(to))
                _record_failure(store, state["digest"], context, hops, exc)
            raise
    finally:
        pool.close()
    state["live"].discard()
    with store.attempt(Digest.parse(result.digest), "promote", **context) as attempt:
        attempt.write_json("result.json", result)
        for index, hop in enumerate(result.hops):
            attempt.add_check(CheckResult(
                name=f"hop-{index + 1}", status=Status.PASS if hop.verified else Status.FAIL,
                detail=f"{hop.endpoint} serves {hop.digest}: {hop.read_back}",
                data=hop.model_dump(mode="json")))
        attempt.finish(summary=f"{len(result.hops)} hop(s) verified, "
                               f"{sum(h.bytes_moved for h in result.hops)} bytes moved")
        return result, str(attempt.path)


def _record_failure(store: EvidenceStore, digest: Digest, context: dict,
                    hops: list[HopRecord], exc: ImagekitError) -> None:
    with store.attempt(digest, "promote", **context) as attempt:
        attempt.write_json("hops.json", [h.model_dump(mode="json") for h in hops])
        checks = [CheckResult(name=f"hop-{i + 1}", status=Status.PASS,
                              detail=f"{h.endpoint} serves {h.digest}") for i, h in
                  enumerate(hops)]
        checks.append(CheckResult(name=f"hop-{len(hops) + 1}", status=Status.ERROR,
                                  detail=exc.one_line()[:1000]))
        attempt.finish(Status.ERROR, summary=f"{type(exc).__name__}: {exc.one_line()}"[:500],
                       checks=checks)
