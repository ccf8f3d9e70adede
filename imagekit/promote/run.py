"""`run_promote`: promotion with its gate and its evidence — what the CLI calls.

GATE: promotion does not know how evidence is judged; the caller hands it the gate
(`imagekit.report.gate.enforce` from the CLI), a callable asked once with the digest about to
go out. It returns the decision (a `GateDecision`) when promotion may proceed and raises
(CheckFailed, exit 1) when refused and not forced. `gate=False` promotes ungated, on purpose.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from imagekit.errors import ImagekitError
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import GateDecision, HopEvidence, PromoteEvidence
from imagekit.oci import ImageReference, Platform
from imagekit.oci.digest import Digest
from imagekit.promote.await_ import AwaitFailed, AwaitHop, AwaitPolicy
from imagekit.promote.await_ import summary as poll_summary
from imagekit.promote.copy import HopNotVerified, HopRecord, PromoteResult, SharedBlobs, promote
from imagekit.promote.live import LiveAttempt
from imagekit.registry import ClientPool
from imagekit.registry.interrupt import Interrupted, graceful
from imagekit.registry.progress import ProgressSink
from imagekit.results import CheckResult, Status


class Gate(Protocol):
    """`imagekit.report.gate.enforce`'s shape: decide (and record an override) or raise."""

    def __call__(self, store: EvidenceStore, digest: Digest, *, force: bool = False,
                  reason: str | None = None, **context: Any) -> GateDecision: ...


def promotion_gate(gate: Gate, store: EvidenceStore, digest: Digest, *, force: bool = False,
                   reason: str | None = None, **context: Any) -> dict:
    """Ask the injected gate; it raises (CheckFailed, exit 1) when refused and not forced."""
    decision = gate(store, digest, force=force, reason=reason, **context)
    data = decision.model_dump(mode="json")
    data["gate"] = "checked"
    return data


def run_promote(source: ImageReference, via: list[ImageReference | AwaitHop],
                to: ImageReference | AwaitHop | None, *,
                store: EvidenceStore, all_platforms: bool = False,
                platform: Platform | None = None, options=None, progress: ProgressSink | None
                = None, gate: Gate | Literal[False], force: bool = False,
                reason: str | None = None, await_policy: AwaitPolicy | None = None,
                pool: ClientPool | None = None, shared: SharedBlobs | None = None
                ) -> tuple[PromoteResult, str]:
    """Promote and record one `promote` attempt keyed by the promoted digest (per-hop records,
    partial ones too when a hop fails). `gate`: the evidence gate (the CLI passes
    `imagekit.report.gate.enforce`), or False to promote ungated. Returns (result, evidence
    directory). `pool`/`shared`: a release's connection pool and blob ledger, shared by the
    promotions of its images (the caller closes that pool)."""
    if gate is True or (gate is not False and not callable(gate)):
        raise TypeError("run_promote needs the gate itself (e.g. imagekit.report.gate.enforce) "
                        "or gate=False")
    hops: list[HopRecord] = []
    context: dict[str, Any] = {
        "source": str(source), "via": [str(v) for v in via],
        "to": str(to) if to is not None else None, "all_platforms": all_platforms,
        "awaited": [str(h) for h in [*via, to] if isinstance(h, AwaitHop)]}
    own_pool = pool is None
    pool = pool or ClientPool(options)
    state: dict[str, Any] = {}

    def gate_fn(digest: Digest) -> dict:
        state["digest"] = digest
        if not gate:
            decision = {"gate": "skipped", "detail": "gate disabled by the caller"}
        else:
            decision = promotion_gate(gate, store, digest, force=force, reason=reason,
                                      promoted_to=[str(v) for v in [*via, to] if v is not None])
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
                                 on_hop=on_hop, await_policy=await_policy, shared=shared)
        except AwaitFailed as exc:
            if "live" in state:
                state["live"].discard()
            if "digest" in state:
                _record_await_failure(store, state["digest"], context, hops, exc)
            raise
        except HopNotVerified as exc:   # the hop's record is in `hops`, verified False
            if "live" in state:
                state["live"].discard()
            if "digest" in state:
                _record_unverified(store, state["digest"], context, hops, exc)
            raise
        except BaseException as exc:  # noqa: BLE001 - recorded as ERROR, then re-raised
            # whatever ends the attempt (a refusal, Ctrl-C, a bug on a hostile document) is
            # written as its ERROR record: never a leftover running.json
            if "live" in state:
                state["live"].discard()
            if "digest" in state:
                where = str(to if to is not None else via[-1]) if (to is not None or via) \
                    else str(source)
                if isinstance(exc, ImagekitError):
                    recorded = exc
                elif isinstance(exc, KeyboardInterrupt):
                    recorded = Interrupted("interrupted", where=where)
                else:
                    recorded = ImagekitError(f"{type(exc).__name__}: {exc}"[:500], where=where)
                _record_failure(store, state["digest"], context, hops, recorded)
            raise
    finally:
        if own_pool:
            pool.close()
    state["live"].discard()
    with store.attempt(Digest.parse(result.digest), "promote", **context) as attempt:
        attempt.write_json("result.json", result)
        attempt.write_result(_evidence(result.source, result.digest, context, result.hops,
                                       copied=result.copied))
        for index, hop in enumerate(result.hops):
            attempt.add_check(hop_check(index, hop))
        attempt.finish(summary=f"{len(result.hops)} hop(s) verified, "
                               f"{sum(h.bytes_moved for h in result.hops)} bytes moved")
        return result, str(attempt.path)


def hop_check(index: int, hop: HopRecord) -> CheckResult:
    """Hop N's verdict is its read-back's: PASS when the endpoint served the digest as sent,
    FAIL with what the read-back found otherwise."""
    if hop.verified:
        return CheckResult(name=f"hop-{index + 1}", status=Status.PASS,
                           detail=f"{hop.endpoint} serves {hop.digest}: {hop.read_back}",
                           data=hop.model_dump(mode="json"))
    return CheckResult(name=f"hop-{index + 1}", status=Status.FAIL,
                       detail=f"{hop.endpoint} does not serve {hop.digest} as sent: "
                              f"{hop.read_back}"[:1000],
                       data=hop.model_dump(mode="json"))


def _record_unverified(store: EvidenceStore, digest: Digest, context: dict,
                       hops: list[HopRecord], exc: HopNotVerified) -> None:
    """A hop whose read-back differed: FAIL, its record kept beside the hops before it."""
    _record_stop(store, digest, context, hops, exc, Status.FAIL, exc.one_line())


def _record_failure(store: EvidenceStore, digest: Digest, context: dict,
                    hops: list[HopRecord], exc: ImagekitError) -> None:
    """A hop that could not be made: the hops before it, and an ERROR for the one that
    failed."""
    _record_stop(store, digest, context, hops, exc, Status.ERROR,
                 f"{type(exc).__name__}: {exc.one_line()}",
                 CheckResult(name=f"hop-{len(hops) + 1}", status=Status.ERROR,
                             detail=exc.one_line()[:1000]))


def _record_stop(store: EvidenceStore, digest: Digest, context: dict, hops: list[HopRecord],
                 exc: ImagekitError, status: Status, summary: str,
                 *more: CheckResult) -> None:
    with store.attempt(digest, "promote", **context) as attempt:
        attempt.write_json("hops.json", [h.model_dump(mode="json") for h in hops])
        attempt.write_result(_evidence(context["source"], str(digest), context, hops,
                                       error=exc.one_line()[:1000]))
        attempt.finish(status, summary=summary[:500],
                       checks=[*(hop_check(i, h) for i, h in enumerate(hops)), *more])


def _record_await_failure(store: EvidenceStore, digest: Digest, context: dict,
                          hops: list[HopRecord], exc: AwaitFailed) -> None:
    """An awaited hop that never came to serve the digest (or tags another one): FAIL, with
    every poll it saw."""
    polls = [p.model_dump(mode="json") for p in exc.polls]
    with store.attempt(digest, "promote", **context) as attempt:
        attempt.write_json("hops.json", [h.model_dump(mode="json") for h in hops])
        attempt.write_json("polls.json", polls)
        evidence = _evidence(context["source"], str(digest), context, hops,
                             error=exc.one_line()[:1000])
        attempt.write_result(evidence.model_copy(update={"hops": [*evidence.hops, HopEvidence(
            endpoint=exc.endpoint, registry=exc.endpoint.split("/", 1)[0], digest=str(digest),
            verified=False, read_back=f"awaited: {poll_summary(exc.polls)}")]}))
        checks = [hop_check(i, h) for i, h in enumerate(hops)]
        checks.append(CheckResult(name=f"hop-{len(hops) + 1}", status=Status.FAIL,
                                  detail=exc.one_line()[:1000],
                                  data={"endpoint": exc.endpoint, "mode": "await",
                                        "polls": polls}))
        attempt.finish(Status.FAIL, summary=exc.one_line()[:500], checks=checks)


def _evidence(source: str, digest: str, context: dict, hops: list[HopRecord],
              error: str | None = None, copied: str | None = None) -> PromoteEvidence:
    return PromoteEvidence(
        source=source, digest=digest, via=list(context["via"]), to=context["to"], error=error,
        copied=copied,
        hops=[HopEvidence(endpoint=h.endpoint, registry=h.registry, digest=h.digest,
                          verified=h.verified, bytes_moved=h.bytes_moved, read_back=h.read_back,
                          referrers=list(h.referrers) if h.mode == "copy" else None,
                          image_bytes=h.image_bytes or None,
                          upload_shape=h.upload_shape or None,
                          mount_fallbacks=list(h.mount_fallbacks))
              for h in hops])
