"""Deciding from signed facts: the gate's verdict for a digest the local store has no evidence
of, reached from the `attested` statements (imported from the registry, verified with a
trusted key: imagekit.attest.pull) alone.

- Per predicate type the NEWEST trusted statement decides, by the time signed inside it
  (`imagekit.trust.signed_time`), never by the order a registry lists them.
- A statement whose key is not trusted now (or not for its type) is named and ignored.
- The newest trusted test-result's tests become check lines (kind and name as signed,
  `passedTests` PASS, `warnedTests` DEFERRED, `failedTests` FAIL), each naming its signer and
  registry; the consumer's required checks and the gate's usual rules apply to them. A FAIL
  the signer's profile accepted (`predicate.acceptances`) is a warning with its reason only
  when the trust policy honours that key's acceptances.
- A referrer that was changed at the registry or is about another digest (a `refused` problem
  of the pull) refuses; one whose blob is missing is named and contributes nothing.
- The newest trusted statement of each later phase (cluster-probe, cluster-accept,
  gpu-preflight, any type with a verdict) this store did not measure itself gives lines too
  (`phase_lines`): the phase's checks as signed, each naming its signer. They refuse where a
  required check covers them and are named otherwise (imagekit.report.decision.gate_of).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from imagekit.evidence import AttemptRecord, EvidenceStore
from imagekit.evidence.kinds import AttestedResult, GateDecision
from imagekit.oci.digest import Digest
from imagekit.report.accepted import PROBE_KINDS
from imagekit.report.decision import (
    accepted_of,
    count_text,
    counts_of,
    evaluate_required,
    gate_of,
)
from imagekit.report.models import EvidenceLine, RequiredOutcome
from imagekit.report.required import Requirement, current_kind
from imagekit.results import CheckResult, Status
from imagekit.trust.policy import TrustedKey, TrustPolicy, short_type, signer_label

TEST_RESULT_TYPE = "https://in-toto.io/attestation/test-result/v0.1"


@dataclass(frozen=True)
class Signed:
    """One attested statement in the store and the key trusted for it now."""

    record: AttemptRecord
    result: AttestedResult
    where: str
    key: TrustedKey

    @property
    def source(self) -> str:
        """`signed by ci 3f2a91c0…, 127.0.0.1:5001/imagekit/x`."""
        when = f" at {self.result.signed_at[:19]}Z" if self.result.signed_at else ""
        return f"signed by {self.key.label}{when}, " \
               f"{self.result.registry}/{self.result.repository}"


def _about(statement: dict, digest: Digest) -> bool:
    subjects = statement.get("subject") if isinstance(statement, dict) else None
    return any(isinstance(s, dict) and isinstance(s.get("digest"), dict) and
               s["digest"].get(digest.algorithm) == digest.hex for s in subjects or [])


def signed_statements(store: EvidenceStore, digest: Digest | str, trust: TrustPolicy
                      ) -> tuple[dict[str, list[Signed]], list[str]]:
    """Trusted statements about `digest` per predicate type, newest first; and what was not
    counted (untrusted key, type outside the key's scope, superseded), one line each."""
    digest = Digest.parse(str(digest))
    by_type: dict[str, list[Signed]] = {}
    ignored: list[str] = []
    for record in store.attempts(digest, "attested"):
        result = store.result(record)
        if not isinstance(result, AttestedResult):
            continue
        where = str(store.path_of(record).relative_to(store.root))
        name = f"{short_type(result.predicate_type)} {result.referrer[:19]}"
        key = trust.by_fingerprint(result.fingerprint)
        if key is None:
            ignored.append(f"{name}: signed by {signer_label(result.signer, result.fingerprint)}"
                           ", a key not trusted here: ignored")
            continue
        if not key.allows_type(result.predicate_type):
            ignored.append(f"{name}: {key.label} is not trusted for "
                           f"{short_type(result.predicate_type)}: ignored")
            continue
        if not _about(result.statement, digest):
            ignored.append(f"{name}: not about {digest}: ignored")
            continue
        by_type.setdefault(result.predicate_type, []).append(Signed(record, result, where, key))
    for uri, items in by_type.items():
        # newest by the signed time (undated ones oldest); the same referrer filed twice
        # (two pulls) counts once
        items.sort(key=lambda s: (s.result.signed_at or "", s.result.referrer), reverse=True)
        seen, kept = set(), []
        for item in items:
            if item.result.referrer in seen:
                continue
            seen.add(item.result.referrer)
            kept.append(item)
        by_type[uri] = kept
        for older in kept[1:]:
            ignored.append(f"{short_type(uri)} {older.result.referrer[:19]} signed "
                           f"{older.result.signed_at or 'undated'}: superseded by "
                           f"{kept[0].result.referrer[:19]} signed "
                           f"{kept[0].result.signed_at or 'undated'}")
    return by_type, ignored


def _acceptances(statement: dict) -> dict[str, dict]:
    raw = statement.get("predicate")
    predicate: dict = raw if isinstance(raw, dict) else {}
    found = predicate.get("acceptances")
    return {a["test"]: a for a in found if isinstance(a, dict) and isinstance(a.get("test"), str)
            } if isinstance(found, list) else {}


def lines_of(signed: Signed) -> list[EvidenceLine]:
    """The test-result's tests as check lines, each naming where it came from."""
    predicate = signed.result.statement.get("predicate") or {}
    accepted = _acceptances(signed.result.statement) if signed.key.acceptances else {}
    lines = []
    for field, status in (("passedTests", Status.PASS), ("warnedTests", Status.DEFERRED),
                          ("failedTests", Status.FAIL)):
        for test in predicate.get(field) or []:
            if not isinstance(test, str) or ":" not in test:
                continue
            kind, _, name = test.partition(":")
            if kind == "required":   # the signer's own requirements: the consumer has its own
                continue
            entry = accepted.get(test)
            lines.append(EvidenceLine(
                kind=current_kind(kind), name=name, status=status, detail=signed.source,
                key=signed.record.key, attempt_id=signed.record.attempt_id,
                finished=signed.record.finished, evidence=signed.where,
                accepted=_accepted_text(entry, signed) if entry and status is not
                Status.PASS else None, signer=signed.key.label))
    return lines


def phase_of(predicate_type: str) -> str:
    """The report's phase of a statement: image (test-result, sbom), hops (promotion),
    cluster (cluster-*, gpu-*), other."""
    name = short_type(predicate_type)
    if name in ("test-result", "sbom"):
        return "image"
    if name == "promotion":
        return "hops"
    if name.startswith(("cluster-", "gpu-")):
        return "cluster"
    return "other"


_RESULTS = {"PASSED": Status.PASS, "WARNED": Status.DEFERRED, "FAILED": Status.FAIL}


def verdict_of(predicate: dict) -> Status | None:
    """A phase statement's verdict as signed (its profile's acceptances applied):
    `verdict`, else `status`, else an in-toto style `result`; None when it states none."""
    for field in ("verdict", "status", "result"):
        value = predicate.get(field)
        if isinstance(value, str):
            if value in Status._value2member_map_:
                return Status(value)
            if value in _RESULTS:
                return _RESULTS[value]
    return None


def phase_lines(signed: Signed) -> list[EvidenceLine]:
    """A later phase's statement as lines: each check it signed (kind: the phase), or one
    `verdict` line when it lists none; the signer's acceptances marked where the trust policy
    honours them. Nothing for a statement that states no verdict (an SBOM, a promotion)."""
    kind = short_type(signed.result.predicate_type)
    raw = signed.result.statement.get("predicate")
    predicate: dict = raw if isinstance(raw, dict) else {}
    verdict = verdict_of(predicate)
    if phase_of(signed.result.predicate_type) not in ("cluster", "other") or "://" in kind \
            or verdict is None:
        return []
    checks = [c for c in predicate.get("checks") or [] if isinstance(c, dict)
              and isinstance(c.get("name"), str) and c.get("status") in Status._value2member_map_]
    found = [(c["name"], Status(c["status"]), str(c.get("detail") or "")) for c in checks] \
        or [("verdict", verdict, "")]
    accepted = {(str(a.get("check")), str(a.get("status"))): a
                for a in predicate.get("accepted") or [] if isinstance(a, dict)} \
        if signed.key.acceptances else {}
    lines = []
    for name, status, detail in found:
        entry = accepted.get((name, status.value)) or \
            accepted.get((name.removeprefix("probe:"), status.value))
        lines.append(EvidenceLine(
            kind=kind, name=name, status=status,
            detail=f"{' '.join(detail.split())[:300]} ({signed.source})" if detail
            else signed.source,
            key=signed.record.key, attempt_id=signed.record.attempt_id,
            finished=signed.record.finished, evidence=signed.where, signer=signed.key.label,
            accepted=_accepted_text(entry, signed) if entry and status is not Status.PASS
            else None))
    return lines


def signed_phase_lines(by_type: dict[str, list[Signed]], measured: Iterable[str] = (),
                       exclude_prefixes: tuple[str, ...] = ()) -> list[EvidenceLine]:
    """The lines of the newest trusted statement of each later phase, for the phases this
    store did not measure itself (`measured`: the kinds of its own lines: what it measured
    speaks for itself)."""
    mine = set(measured)
    lines = []
    for items in by_type.values():
        for line in phase_lines(items[0]) if items else []:
            if line.kind not in mine and not line.kind.startswith(exclude_prefixes or ("\0",)):
                lines.append(line)
    return lines


def _accepted_text(entry: dict, signed: Signed) -> str:
    """Why a signed acceptance covers a line: its reason, profile and signer."""
    return (f"{entry.get('reason', '')} (profile {entry.get('profile', '?')}, "
            f"signed by {signed.key.label})")


def _accepted_here(local: list[EvidenceLine], signed: Signed) -> list[EvidenceLine]:
    """`local` with the trusted signer's probe acceptances applied (same probe, same status)."""
    if not signed.key.acceptances:
        return local
    by_probe = {test.partition(":")[2]: entry
                for test, entry in _acceptances(signed.result.statement).items()
                if test.partition(":")[0] == "probe"}
    marked = []
    for line in local:
        probe = line.name.removeprefix("probe:") if line.kind == "cluster-probe" else line.name
        entry = by_probe.get(probe) if line.kind in PROBE_KINDS else None
        if entry and not line.accepted and line.status is not Status.PASS \
                and entry.get("status") == line.status.value:
            line = line.model_copy(update={"accepted": _accepted_text(entry, signed)})
        marked.append(line)
    return marked


def _summary(lines: list[EvidenceLine], signed: Signed) -> list[str]:
    """`probe: 4 PASS, 2 accepted (torch_arch FAIL, cli_help DEFERRED), signed by ci 3f2a…,
    127.0.0.1:5001/x` per kind: counted as every report counts (an accepted FAIL is neither a
    PASS nor a FAIL of the phase)."""
    rows = []
    for kind in dict.fromkeys(line.kind for line in lines):
        mine = [line for line in lines if line.kind == kind]
        rows.append(f"{kind}: {count_text(counts_of(mine), accepted_of(mine))}, "
                    f"{signed.source}")
    return rows


@dataclass(frozen=True)
class Judged:
    """A gate decision from trusted statements, with every line it rests on: what `promote`
    is told and what the report renders are the same computation."""

    decision: GateDecision
    signed: list[EvidenceLine]
    local: list[EvidenceLine]
    phases: list[EvidenceLine]
    required: list[RequiredOutcome]


def attested_judgement(store: EvidenceStore, digest: Digest | str, trust: TrustPolicy,
                       requirements: Iterable[Requirement], *,
                       problems: Iterable[CheckResult] = (), exclude_prefixes: tuple[str, ...]
                       = (), pulled: str = "", local: Iterable[EvidenceLine] = ()) -> Judged:
    """The gate's decision from the newest trusted test-result about `digest` beside what
    this store measured later (`local`) and the trusted later-phase statements; "no
    evidence" (refused) when there is no test-result. `problems`: the pull's unusable
    referrers."""
    digest = Digest.parse(str(digest))
    requirements = [r for r in requirements if not r.kind.startswith(exclude_prefixes)] \
        if exclude_prefixes else list(requirements)
    by_type, ignored = signed_statements(store, digest, trust)
    local = list(local)
    phases = signed_phase_lines(by_type, {x.kind for x in local}, exclude_prefixes)
    problems = list(problems)
    refused = [f"{c.name}: {c.detail}" for c in problems
               if (c.data or {}).get("problem") == "refused"]
    unavailable = [f"{c.name}: {c.detail} (no evidence from it)" for c in problems
                   if (c.data or {}).get("problem") != "refused"]
    newest = next(iter(by_type.get(TEST_RESULT_TYPE) or []), None)
    if newest is None:
        where = f" at {pulled}" if pulled else ""
        outcomes = evaluate_required([*local, *phases], requirements)
        return Judged(GateDecision(
            digest=str(digest), allowed=False, required=[str(r) for r in requirements],
            reasons=[*refused, f"no evidence for {digest} in {store.root}, and no statement "
                     f"signed by a trusted key ({trust.names()}){where}"],
            warnings=unavailable, ignored=ignored), [], local, phases, outcomes)
    signed = [line for line in lines_of(newest) if not line.kind.startswith(exclude_prefixes)] \
        if exclude_prefixes else lines_of(newest)
    # what this store measured itself (later phases) counts too, and a trusted signer's
    # acceptance of a probe covers the same probe measured here (a cluster probe's in-Pod
    # torch_arch), as the spec's own acceptances do (report.accepted.match)
    local = _accepted_here(local, newest)
    lines = [*signed, *local]
    outcomes = evaluate_required([*lines, *phases], requirements)
    decision = gate_of(str(digest), lines, outcomes, phases)
    result = newest.result.statement.get("predicate", {}).get("result")
    if result == "FAILED" and all(x.accepted for x in signed if x.status is not Status.PASS):
        # in-toto's result counts any failed test; the profile it was signed under accepted
        # each one, so the gate is not refused by it: say so where the word FAILED appears
        result = "FAILED in in-toto's terms, every failure accepted by its profile"
    sources = [f"test-result {result}, "
               f"{newest.source} (referrer {newest.result.referrer[:19]}, {newest.where})",
               *_summary(signed, newest)]
    for uri, items in by_type.items():
        if uri != TEST_RESULT_TYPE:
            sources.append(f"{short_type(uri)}: {items[0].source} "
                           f"(referrer {items[0].result.referrer[:19]})")
    return Judged(decision.model_copy(update={
        "allowed": decision.allowed and not refused,
        "reasons": [*refused, *decision.reasons],
        "warnings": [*decision.warnings, *unavailable], "sources": sources,
        "ignored": ignored}), signed, local, phases, outcomes)


def attested_decision(store: EvidenceStore, digest: Digest | str, trust: TrustPolicy,
                      requirements: Iterable[Requirement], *,
                      problems: Iterable[CheckResult] = (), exclude_prefixes: tuple[str, ...]
                      = (), pulled: str = "", local: Iterable[EvidenceLine] = ()
                      ) -> GateDecision:
    """The gate's decision alone (attested_judgement)."""
    return attested_judgement(store, digest, trust, requirements, problems=problems,
                              exclude_prefixes=exclude_prefixes, pulled=pulled,
                              local=local).decision
