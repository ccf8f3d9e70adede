"""The promotion gate: a digest with a FAIL/ERROR, or a required check that is missing or not a
pass, is not promoted — unless someone forces it with a reason, and that is recorded.

`imagekit promote` calls `enforce()` (or `check_promotable()` + `record_override()`) before it
copies anything. Promotion evidence itself (kind `promote`) is not gate input: a failed earlier
hop must not stop a retry. DEFERRED on a check that is not required is a warning, not a refusal.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagekit.errors import CheckFailed, ImagekitError, InvalidInput, NotFound
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import GateOverrideResult
from imagekit.oci.digest import Digest
from imagekit.report import trusted
from imagekit.report.collect import build_report
from imagekit.report.decision import (
    LATER_KIND_PREFIXES,  # noqa: F401 - re-exported
    evaluate_required,
    gate_of,
    image_phase_measured,
)
from imagekit.report.links import LATER_LINKS, of_link
from imagekit.report.models import EvidenceLine, GateDecision, ImageReport, RequiredOutcome
from imagekit.report.required import parse_requirements
from imagekit.results import CheckResult, Status

OVERRIDE_KIND = "gate-override"


def decide(report: ImageReport) -> GateDecision:
    """The gate's verdict stored in a report (computed once, by `build_report`)."""
    return report.gate


@dataclass(frozen=True)
class Judgement:
    """The gate's decision and every line it judged: this store's (`local`, a trusted
    signer's probe acceptances applied), the trusted test-result's (`signed`) and the trusted
    later phases' (`phases`), with the required checks evaluated over them. `promote`'s gate
    and the auditor's report are this one computation."""

    report: ImageReport | None
    decision: GateDecision
    local: list[EvidenceLine] = field(default_factory=list)
    signed: list[EvidenceLine] = field(default_factory=list)
    phases: list[EvidenceLine] = field(default_factory=list)
    required: list[RequiredOutcome] = field(default_factory=list)


def judge(store: EvidenceStore, digest: Digest | str, required: Iterable[str] | None = None,
          *, profile: str | None = None, trust=None, pull=None,  # noqa: ANN001
          spec_path: Path | None = None, state_dir: Path | None = None,
          **report_args: Any) -> Judgement:
    """The gate's judgement of `digest` (check_promotable says what decides when).
    `report_args`: build_report's naming arguments (requested, name, resolution)."""
    digest = Digest.parse(str(digest))
    requirements = [str(r) for r in parse_requirements(required)]
    try:
        report = build_report(store, digest, required=requirements, profile=profile,
                              spec_path=spec_path, state_dir=state_dir, **report_args)
    except NotFound:
        report = None
    local = list(report.checks) if report is not None else []
    if report is not None and (image_phase_measured(local) or (local and not trust)):
        phases = trusted.signed_phase_lines(
            trusted.signed_statements(store, digest, trust)[0], {x.kind for x in local}) \
            if trust else []
        if not phases:
            return Judgement(report, report.gate, local, [], [], list(report.required))
        outcomes = evaluate_required([*local, *phases], parse_requirements(requirements))
        return Judgement(report, gate_of(str(digest), local, outcomes, phases), local, [],
                         phases, outcomes)
    if trust:
        return _from_registry(store, digest, trust, pull, requirements, local=local,
                              report=report)
    hint = " (give --trust-key to decide from the statements signed at the registry)" \
        if trust is None or not trust else ""
    return Judgement(report, GateDecision(
        digest=str(digest), allowed=False, required=requirements,
        reasons=[f"no evidence for {digest} in {store.root}{hint}"]), local,
        required=evaluate_required(local, parse_requirements(requirements)))


def check_promotable(store: EvidenceStore, digest: Digest | str,
                     required: Iterable[str] | None = None, *,
                     profile: str | None = None, trust=None, pull=None,  # noqa: ANN001
                     sign_links: Iterable[str] | None = None, spec_path: Path | None = None,
                     state_dir: Path | None = None) -> GateDecision:
    """Whether `digest` may be promoted. Never raises for a refusal: read `.allowed`.

    A digest the store knows nothing about is refused (no evidence is not a pass) — unless
    `trust` (an imagekit.trust.TrustPolicy) is given: then the registry's signed statements
    decide (`pull(store, digest, trust)` imports them first, imagekit.attest.pull; the
    decision names the signer and registry of each fact: imagekit.report.trusted). With
    `trust`, the newest trusted statement of each later phase this store did not measure
    (cluster probe, cluster accept, GPU preflight) is judged too: a non-PASS refuses where a
    required check covers that phase, and is a warning that names it otherwise. A non-PASS
    status the images spec accepts for this image in its profile (the profile named by the
    evidence, or `profile`) is a warning with its reason, not a refusal. `sign_links`: the
    promotion will be signed over these chain links; each must be held (local or trusted
    evidence), or the gate refuses (a forced promotion records why and marks the chain).
    `spec_path`/`state_dir`: the images spec whose acceptances apply and infra's state (the
    CLI's settings; build_report).
    """
    judged = judge(store, digest, required, profile=profile, trust=trust, pull=pull,
                   spec_path=spec_path, state_dir=state_dir)
    decision = judged.decision
    if sign_links is not None:
        decision = _signable(decision, [*judged.signed, *judged.local], sign_links)
    return decision


def _image_phase(lines) -> bool:  # noqa: ANN001
    return image_phase_measured(lines)


def _from_registry(store: EvidenceStore, digest: Digest, trust, pull, requirements,  # noqa: ANN001
                   exclude_prefixes: tuple[str, ...] = (), local=(),  # noqa: ANN001
                   report: ImageReport | None = None) -> Judgement:
    """The judgement from the trusted statements about `digest`, beside what this store
    measured later (`local`: cluster probes…, each line naming its source)."""
    problems, pulled, ignored = [], "", []
    local = [line for line in local if not line.kind.startswith(exclude_prefixes)] \
        if exclude_prefixes else list(local)
    if pull is not None:
        try:
            outcome = pull(store, digest, trust)
            problems, pulled = outcome.problems, f"{outcome.registry}/{outcome.repository}"
            ignored = list(getattr(outcome, "ignored", []) or [])
        except ImagekitError as exc:
            return Judgement(report, GateDecision(
                digest=str(digest), allowed=False, required=requirements,
                reasons=[f"no evidence for {digest} in {store.root}, and the registry's "
                         f"statements could not be read: {exc.one_line()}"]), local,
                required=evaluate_required(local, parse_requirements(requirements)))
    judged = trusted.attested_judgement(store, digest, trust, parse_requirements(requirements),
                                        problems=problems, pulled=pulled,
                                        exclude_prefixes=exclude_prefixes, local=local)
    decision = judged.decision
    if ignored:
        decision = decision.model_copy(update={"ignored": [
            *(f"{x} ({pulled})" for x in ignored), *decision.ignored]})
    return Judgement(report, decision, judged.local, judged.signed, judged.phases,
                     judged.required)


def _signable(decision: GateDecision, lines, sign_links: Iterable[str]) -> GateDecision:  # noqa: ANN001
    """Refuse to sign a promotion chain over an image-phase link the evidence does not hold
    (`IMAGEKIT_REQUIRED_LINKS=''` or no evidence must not give a passing chain)."""
    wanted = [link for link in dict.fromkeys(sign_links) if link not in LATER_LINKS]
    reasons = []
    if not list(sign_links):
        reasons.append("the promotion chain would be signed with no required link "
                       "(IMAGEKIT_REQUIRED_LINKS is empty): it would prove nothing")
    for link in wanted:
        if not any(of_link(line.kind, link) for line in lines):
            reasons.append(f"cannot sign the promotion chain over link {link}: the evidence "
                           "holds nothing of it")
    if not reasons:
        return decision
    return decision.model_copy(update={"allowed": False,
                                       "reasons": [*decision.reasons, *reasons]})


def record_override(store: EvidenceStore, digest: Digest | str, reason: str, *,
                    decision: GateDecision | None = None, user: str | None = None,
                    **context: Any) -> GateDecision:
    """Record that a refused digest is promoted anyway, and why. Returns the decision, marked
    overridden and pointing at the new evidence attempt. An empty reason is refused."""
    reason = " ".join((reason or "").split())
    if not reason:
        raise InvalidInput("--force needs a non-empty --reason \"…\" (it is recorded)")
    digest = Digest.parse(str(digest))
    if decision is None:
        decision = check_promotable(store, digest)
    user = user or _user()
    with store.attempt(digest, OVERRIDE_KIND, reason=reason, user=user,
                       refused_for=list(decision.reasons), required=list(decision.required),
                       **context) as attempt:
        attempt.write_json("decision.json", decision)
        attempt.write_result(GateOverrideResult(
            reason=reason, user=user, refused_for=list(decision.reasons),
            required=list(decision.required),
            context={k: v if v is None or isinstance(v, str) else
                     [str(x) for x in v] if isinstance(v, (list, tuple)) else str(v)
                     for k, v in context.items()}))
        verdict = Status.PASS if decision.allowed else Status.FAIL
        attempt.finish(verdict, summary=f"forced by {user}: {reason}"[:500], checks=[
            CheckResult(name="gate", status=verdict,
                        detail="; ".join(decision.reasons)[:2000] or "gate allowed",
                        data={"forced": True, "reason": reason})])
    where = str(attempt.path.relative_to(store.root))
    return decision.model_copy(update={"overridden": True, "override_reason": reason,
                                       "override_evidence": where})


def enforce(store: EvidenceStore, digest: Digest | str, *, force: bool = False,
            reason: str | None = None, required: Iterable[str] | None = None,
            profile: str | None = None, trust=None, pull=None,  # noqa: ANN001
            sign_links: Iterable[str] | None = None, spec_path: Path | None = None,
            state_dir: Path | None = None, **context: Any) -> GateDecision:
    """What `imagekit promote` calls before copying: returns the decision when promotion may go
    ahead (allowed, or refused but forced with a reason — then recorded), raises CheckFailed
    (exit 1) with every reason on one line when refused and not forced. `trust`/`pull`: decide
    from the registry's signed statements where the store has none (check_promotable)."""
    if force and not " ".join((reason or "").split()):
        raise InvalidInput("--force needs a non-empty --reason \"…\" (it is recorded)")
    decision = check_promotable(store, digest, required, profile=profile, trust=trust,
                                pull=pull, sign_links=sign_links, spec_path=spec_path,
                                state_dir=state_dir)
    if decision.allowed:
        return decision
    if force:
        return record_override(store, digest, reason or "", decision=decision, **context)
    ignored = f" [ignored: {'; '.join(decision.ignored)[:300]}]" if decision.ignored else ""
    raise CheckFailed("promotion refused by the gate: " + "; ".join(decision.reasons)[:1500]
                      + ignored + " — fix the evidence, or --force --reason \"…\"",
                      where=str(digest))


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry in a container
        return "unknown"


#: What the engine on a cluster produced about an image: not image-phase evidence. A failed
#: on-cluster start must not stop the next acceptance of the same image.
ACCEPTANCE_KINDS_PREFIXES = ("accept-", "cluster-accept", "bench", "engine-startup")


def image_phase_gate(store: EvidenceStore, digest: Digest | str, *,
                     required: Iterable[str] | None = None,
                     profile: str | None = None, trust=None, pull=None,  # noqa: ANN001
                     spec_path: Path | None = None, state_dir: Path | None = None
                     ) -> GateDecision:
    """What `imagekit cluster accept` asks before it starts an engine: does the image-phase
    evidence (build, probes, images verify, copies — everything but acceptance and load)
    pass the gate? Raises CheckFailed (exit 1) with every reason when it does not. Where the
    store has none and `trust` is given, the registry's trusted statements decide.
    `spec_path`/`state_dir`: as check_promotable."""
    digest = Digest.parse(str(digest))
    requirements = [str(r) for r in parse_requirements(required)]
    try:
        report = build_report(store, digest, required=requirements, profile=profile,
                              spec_path=spec_path, state_dir=state_dir)
    except NotFound:
        report = None
    if report is None or not image_phase_measured(report.checks):
        if not trust:
            raise CheckFailed(f"no image-phase evidence for {digest} in {store.root}: it is "
                              "not accepted on a cluster before `images verify` (or give "
                              "--trust-key to decide from the registry's signed statements)",
                              where=str(digest))
        decision = _from_registry(store, digest, trust, pull, requirements,
                                  exclude_prefixes=ACCEPTANCE_KINDS_PREFIXES,
                                  local=report.checks if report is not None else ()).decision
        if not decision.allowed:
            raise CheckFailed("image-phase evidence does not pass the gate: "
                              + "; ".join(decision.reasons)[:1500], where=str(digest))
        return decision
    lines = [line for line in report.checks
             if not line.kind.startswith(ACCEPTANCE_KINDS_PREFIXES)]
    required_here = [o for o in report.required
                     if not str(o.requirement).split(":")[0].startswith(ACCEPTANCE_KINDS_PREFIXES)]
    decision = gate_of(str(digest), lines, required_here)
    if not decision.allowed:
        raise CheckFailed("image-phase evidence does not pass the gate: "
                          + "; ".join(decision.reasons)[:1500], where=str(digest))
    return decision
