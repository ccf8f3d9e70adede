"""Import signed statements from a registry into the evidence store: every bundle referrer of
a digest verified (trusted key, subject = the served digest, every blob re-hashed:
`read_attestations`) and filed as kind `attested`, with its provenance — never mixed with what
this machine measured (imagekit.evidence.kinds.AttestedResult).

Used by `imagekit evidence pull REF --trust-key …`, and handed to the gate, `report` and the
NAME resolver (they sit below this layer) as a callable: where the store has no evidence of
its own for a digest, they pull first and decide from what trusted keys signed.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from imagekit.attest.verify import read_attestations
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import AttestedResult
from imagekit.oci.digest import Digest
from imagekit.registry import RegistryClient
from imagekit.results import CheckResult, Status
from imagekit.trust.policy import TrustPolicy, short_type


class PullReport(BaseModel):
    """What one pull found at one endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registry: str
    repository: str
    digest: str
    filed: list[str] = []
    already: list[str] = []
    ignored: list[str] = []
    #: referrers named as unusable: `unavailable` (missing/truncated blob: no evidence) or
    #: `refused` (changed at the registry, about another digest: the gate refuses)
    problems: list[CheckResult] = []
    checks: list[CheckResult] = []

    @property
    def refused(self) -> list[CheckResult]:
        return [c for c in self.problems if (c.data or {}).get("problem") == "refused"]


def _known(store: EvidenceStore, digest: Digest) -> set[tuple[str, str]]:
    known = set()
    for record in store.attempts(digest, "attested"):
        result = record.result or {}
        known.add((str(result.get("referrer")), str(result.get("fingerprint"))))
    return known


def file_attested(store: EvidenceStore, digest: Digest, item: dict, registry: str,
                  repository: str) -> str:
    """File one verified statement (an item of `read_attestations`) as kind `attested`;
    returns its attempt directory relative to the store."""
    where = f"{registry}/{repository}"
    with store.attempt(digest, "attested", source=where, referrer=item["referrer"],
                       signer=item["signer"]) as attempt:
        attempt.write_json("statement.json", item["statement"])
        attempt.write_result(AttestedResult(
            registry=registry, repository=repository, referrer=item["referrer"],
            bundle=item["bundle"], fingerprint=item["fingerprint"], signer=item["signer"],
            predicate_type=item["type"], signed_at=item["signed_at"],
            statement=item["statement"]))
        attempt.finish(Status.PASS, summary=f"{short_type(item['type'])} signed by "
                       f"{item['label']}, read from {where}", checks=[CheckResult(
                           name="signature", status=Status.PASS,
                           detail=f"verified with {item['label']}; subject = {digest}; "
                                  f"bundle {item['bundle'][:19]} re-hashed")])
    return str(attempt.path.relative_to(store.root))


def pull_attestations(client: RegistryClient, repository: str, digest: Digest,
                      trust: TrustPolicy, store: EvidenceStore) -> PullReport:
    """Verify every referrer of `digest` at `client`'s registry and file each verified one
    (once: a referrer already filed with the same key is not filed again)."""
    registry = client.registry if hasattr(client, "registry") else str(client)
    found, checks = read_attestations(client, repository, digest, trust)
    known = _known(store, digest)
    filed, already = [], []
    for item in found:
        if (item["referrer"], item["fingerprint"]) in known:
            already.append(item["referrer"])
            continue
        filed.append(file_attested(store, digest, item, registry, repository))
        known.add((item["referrer"], item["fingerprint"]))
    return PullReport(
        registry=registry, repository=repository, digest=str(digest), filed=filed,
        already=already,
        ignored=[f"{c.name}: {c.detail}" for c in checks if (c.data or {}).get("ignored")],
        problems=[c for c in checks if c.status is not Status.PASS], checks=checks)


def puller(pool, reference):  # noqa: ANN001, ANN201 - a ClientPool, an ImageReference
    """The callable the gate, report and resolver are handed: pull(store, digest, trust) ->
    PullReport, reading the referrers at `reference`'s endpoint."""

    def pull(store: EvidenceStore, digest: Digest, trust: TrustPolicy) -> PullReport:
        return pull_attestations(pool.get(reference.registry), reference.repository, digest,
                                 trust, store)

    return pull
