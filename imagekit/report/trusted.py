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
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from imagekit.evidence import AttemptRecord, EvidenceStore
from imagekit.evidence.kinds import AttestedResult, GateDecision
from imagekit.oci.digest import Digest
from imagekit.report.collect import decide, evaluate_required
from imagekit.report.models import EvidenceLine
from imagekit.report.required import Requirement
from imagekit.results import CheckResult, Status
from imagekit.trust.policy import TrustedKey, TrustPolicy, short_type

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
            ignored.append(f"{name}: signed by {result.signer} "
                           f"{result.fingerprint[7:15]}…, a key not trusted here: ignored")
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
                kind=kind, name=name, status=status, detail=signed.source,
                key=signed.record.key, attempt_id=signed.record.attempt_id,
                finished=signed.record.finished, evidence=signed.where,
                accepted=_accepted_text(entry, signed) if entry and status is not
                Status.PASS else None))
    return lines


def _accepted_text(entry: dict, signed: Signed) -> str:
    """Why a signed acceptance covers a line: its reason, profile and signer."""
    return (f"{entry.get('reason', '')} (profile {entry.get('profile', '?')}, "
            f"signed by {signed.key.label})")


def _accepted_here(local: list[EvidenceLine], signed: Signed) -> list[EvidenceLine]:
    """`local` with the trusted signer's probe acceptances applied (same probe, same status)."""
    from imagekit.report.accepted import PROBE_KINDS

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
    """`probe PASS (5), signed by ci 3f2a…, 127.0.0.1:5001/x` per kind."""
    rows = []
    for kind in dict.fromkeys(line.kind for line in lines):
        mine = [line for line in lines if line.kind == kind]
        worst = next((s for s in (Status.ERROR, Status.FAIL, Status.DEFERRED, Status.PASS)
                      if any(x.status is s for x in mine)), Status.PASS)
        accepted = sum(1 for x in mine if x.accepted)
        rows.append(f"{kind} {worst.value} ({len(mine)} check(s)"
                    + (f", {accepted} accepted" if accepted else "") + f"), {signed.source}")
    return rows


def attested_decision(store: EvidenceStore, digest: Digest | str, trust: TrustPolicy,
                      requirements: Iterable[Requirement], *,
                      problems: Iterable[CheckResult] = (), exclude_prefixes: tuple[str, ...]
                      = (), pulled: str = "", local: Iterable[EvidenceLine] = ()
                      ) -> GateDecision:
    """The gate's decision from the newest trusted test-result about `digest`; "no evidence"
    (refused) when there is none. `problems`: the pull's unusable referrers."""
    digest = Digest.parse(str(digest))
    requirements = [r for r in requirements if not r.kind.startswith(exclude_prefixes)] \
        if exclude_prefixes else list(requirements)
    by_type, ignored = signed_statements(store, digest, trust)
    problems = list(problems)
    refused = [f"{c.name}: {c.detail}" for c in problems
               if (c.data or {}).get("problem") == "refused"]
    unavailable = [f"{c.name}: {c.detail} (no evidence from it)" for c in problems
                   if (c.data or {}).get("problem") != "refused"]
    newest = next(iter(by_type.get(TEST_RESULT_TYPE) or []), None)
    if newest is None:
        where = f" at {pulled}" if pulled else ""
        return GateDecision(
            digest=str(digest), allowed=False, required=[str(r) for r in requirements],
            reasons=[*refused, f"no evidence for {digest} in {store.root}, and no statement "
                     f"signed by a trusted key ({trust.names()}){where}"],
            warnings=unavailable, ignored=ignored)
    lines = [line for line in lines_of(newest) if not line.kind.startswith(exclude_prefixes)] \
        if exclude_prefixes else lines_of(newest)
    signed_lines = lines
    # what this store measured itself (later phases) counts too, and a trusted signer's
    # acceptance of a probe covers the same probe measured here (a cluster probe's in-Pod
    # torch_arch), as the spec's own acceptances do (report.accepted.match)
    lines = [*lines, *_accepted_here(list(local), newest)]
    outcomes = evaluate_required(lines, requirements)
    decision = decide(str(digest), lines, outcomes)
    sources = [f"test-result {newest.result.statement.get('predicate', {}).get('result')}, "
               f"{newest.source} (referrer {newest.result.referrer[:19]}, {newest.where})",
               *_summary(signed_lines, newest)]
    for uri, items in by_type.items():
        if uri != TEST_RESULT_TYPE:
            sources.append(f"{short_type(uri)}: {items[0].source} "
                           f"(referrer {items[0].result.referrer[:19]})")
    return decision.model_copy(update={
        "allowed": decision.allowed and not refused,
        "reasons": [*refused, *decision.reasons],
        "warnings": [*decision.warnings, *unavailable], "sources": sources,
        "ignored": ignored})
