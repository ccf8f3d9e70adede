"""The auditor's chain: `imagekit report REF --trust-key …` renders what trusted keys signed
about the image at the registry — image phase (test-result, SBOM), hops (the promotion
chain) and cluster phase (any `cluster-*` predicate type), each statement naming its signer —
beside whatever this store measured itself, and the same gate decision `promote` would reach.

Any predicate type renders: a generic summary of its predicate (`result`/`status`/`verdict`,
counts of lists, the first scalar facts), so the cluster statements other commands sign show
up without this module knowing their shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from imagekit.errors import ImagekitError, NotFound
from imagekit.evidence import EvidenceStore
from imagekit.oci.digest import Digest
from imagekit.report.gate import judge
from imagekit.report.models import ImageReport, SignedStatement
from imagekit.report.trusted import Signed, phase_of, signed_statements
from imagekit.results import Status
from imagekit.trust.policy import TrustPolicy, short_type


def summarize(predicate_type: str, statement: dict) -> list[str]:
    """A few lines of what a statement says (generic for unknown types)."""
    raw = statement.get("predicate")
    predicate: dict = raw if isinstance(raw, dict) else {}
    name = short_type(predicate_type)
    if name == "test-result":
        out = [f"result {predicate.get('result')}: {len(predicate.get('passedTests') or [])} "
               f"passed, {len(predicate.get('warnedTests') or [])} warned, "
               f"{len(predicate.get('failedTests') or [])} failed"]
        passed = [str(t) for t in (predicate.get("passedTests") or [])[:40]]
        if passed:
            out.append("passed: " + ", ".join(passed))
        out += [f"failed: {t}" for t in (predicate.get("failedTests") or [])[:10]]
        for report in (predicate.get("serveArgs") or [])[:4]:   # what the image's parser took
            if isinstance(report, dict):
                commands = ", ".join(f"{c.get('label')} {c.get('status')}"
                                     for c in report.get("commands") or []
                                     if isinstance(c, dict))
                out.append(f"serve_args {report.get('status')}: parsed by {report.get('engine')} "
                           f"{report.get('version')} ({commands or 'no command'}; prefill "
                           f"switch {report.get('prefill_switch')})"[:300])
        for entry in (predicate.get("acceptances") or [])[:10]:
            if isinstance(entry, dict):
                out.append(f"accepted {entry.get('test')} {entry.get('status')} (profile "
                           f"{entry.get('profile')}, spec {str(entry.get('spec_digest'))[:19]}):"
                           f" {entry.get('reason')}")
        return out
    if name == "promotion":
        out = [(f"link {link.get('name')}: {link.get('status')}"
                + (f" — {link['detail']}" if link.get("detail") else ""))[:300]
               for link in predicate.get("links") or [] if isinstance(link, dict)]
        out += [f"hop {n} {hop.get('endpoint')}: "
                + ("read back and verified" if hop.get("verified") else "NOT verified")
                for n, hop in enumerate((h for h in predicate.get("hops") or []
                                         if isinstance(h, dict)), 1)]
        out.append(f"required: {', '.join(map(str, predicate.get('required') or [])) or 'none'}")
        if predicate.get("forced"):
            out.append(f"FORCED past the gate: {predicate['forced']}"[:300])
        return out
    if name == "sbom":
        components = predicate.get("components")
        return [f"{len(components) if isinstance(components, list) else 0} components "
                f"({predicate.get('bomFormat', 'CycloneDX')} {predicate.get('specVersion', '')})"]
    out = _verdict_line(predicate)
    for field in ("cluster", "node", "imageID", "image_id"):
        if isinstance(predicate.get(field), (str, int, float, bool)):
            out.append(f"{field}: {predicate[field]}")
    for field, value in predicate.items():
        if len(out) >= 12:
            break
        if isinstance(value, list):
            out.append(f"{field}: {len(value)} item(s)")
        elif isinstance(value, dict) and field not in ("metadata",):
            statuses = [v.get("status") for v in value.values() if isinstance(v, dict)]
            if statuses:
                out.append(f"{field}: " + ", ".join(f"{k} {v.get('status')}" for k, v in
                                                   value.items() if isinstance(v, dict))[:300])
        elif field not in ("result", "status", "verdict", "cluster", "node", "imageID",
                           "image_id") and isinstance(value, (str, int, float, bool)):
            out.append(f"{field}: {value}"[:200])
    return out or ["(no summary for this predicate type; the statement is in the evidence)"]


def _verdict_line(predicate: dict) -> list[str]:
    """One line for the statement's outcome. A predicate may carry a raw worst status beside
    its verdict (a cluster probe: `status` FAIL, `verdict` PASS when the FAIL is accepted):
    the verdict leads and the raw status is said to be raw, so the two never read as a
    contradiction."""
    said = {f: str(predicate[f]) for f in ("verdict", "result", "status")
            if isinstance(predicate.get(f), (str, int, float, bool))}
    if not said:
        return []
    lead, value = next(iter(said.items()))
    others = [f"{f} {v}" for f, v in said.items() if f != lead and v != value]
    line = f"{lead}: {value}"
    if others:
        line += f" (raw worst check status: {', '.join(v for v in others)}; the verdict " \
            "applies the profile's acceptances)"
    return [line]


def _hops(predicate_type: str, statement: dict) -> list[str]:
    """A promotion statement's hops that were read back and verified, in order."""
    raw = statement.get("predicate")
    if short_type(predicate_type) != "promotion" or not isinstance(raw, dict):
        return []
    return [str(h["endpoint"]) for h in raw.get("hops") or []
            if isinstance(h, dict) and h.get("verified") and h.get("endpoint")]


def _statement(item: Signed, current: bool) -> SignedStatement:
    result = item.result
    return SignedStatement(
        phase=phase_of(result.predicate_type), predicate_type=result.predicate_type,
        name=short_type(result.predicate_type), signer=item.key.label,
        fingerprint=result.fingerprint, registry=result.registry,
        repository=result.repository, referrer=result.referrer, signed_at=result.signed_at,
        current=current, summary=summarize(result.predicate_type, result.statement),
        hops=_hops(result.predicate_type, result.statement), evidence=item.where)


def chain_of(store: EvidenceStore, digest: Digest | str, trust: TrustPolicy
             ) -> list[SignedStatement]:
    by_type, _ = signed_statements(store, digest, trust)
    order = {"image": 0, "hops": 1, "cluster": 2, "other": 3}
    found = [_statement(item, index == 0) for items in by_type.values()
             for index, item in enumerate(items)]
    return sorted(found, key=lambda s: (order[s.phase], s.name, not s.current,
                                        s.signed_at or ""))


def report_with_trust(store: EvidenceStore, digest: Digest | str, trust: TrustPolicy, pull,  # noqa: ANN001
                      *, required: Iterable[str] | None = None, requested: str = "",
                      name: str | None = None, profile: str | None = None,
                      resolution: str | None = None, spec_path: Path | None = None,
                      state_dir: Path | None = None) -> ImageReport:
    """The report of what this store holds plus the chain trusted keys signed (pulled from
    the registry first), judged by the same computation `promote` is gated by
    (imagekit.report.gate.judge): its decision, and every line and required check it read.
    `spec_path`/`state_dir`: the CLI's images spec and infra state (build_report)."""
    digest = Digest.parse(str(digest))
    pulled = None
    if pull is not None:   # the chain is shown whatever the store holds itself: pull once
        try:
            outcome = pull(store, digest, trust)
            pulled = lambda *_: outcome  # noqa: E731 - the gate reads the same pull
        except ImagekitError:
            pulled = pull                # the gate says why, in its reasons
    judged = judge(store, digest, required, profile=profile, trust=trust, pull=pulled,
                   spec_path=spec_path, state_dir=state_dir, requested=requested, name=name,
                   resolution=resolution)
    decision, report = judged.decision, judged.report
    if report is None:
        raise NotFound(f"no evidence for {digest} in {store.root}, and no statement signed by "
                       f"a trusted key ({trust.names()}) at the registry: "
                       + "; ".join(decision.reasons)[:600], where=str(store.root))
    chain = chain_of(store, digest, trust)
    status = report.status
    if not report.checks:   # nothing measured here: the signed chain's verdict
        status = Status.PASS if decision.allowed and not decision.warnings else \
            Status.DEFERRED if decision.allowed else Status.FAIL
        if not any(s.name == "test-result" for s in chain):
            status = Status.ERROR
    return report.model_copy(update={
        "gate": decision, "chain": chain, "status": status, "checks": judged.local,
        "signed_checks": judged.signed, "signed_phases": judged.phases,
        "required": judged.required})
