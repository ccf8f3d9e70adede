"""The report's own records: what a release engineer reads, what CI parses, what the gate decides.

Every field is derived from the evidence store; nothing here is measured. A section that found no
evidence is empty (or None), it is never filled with a guess.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from imagekit.evidence.kinds import GateDecision, NoiseVerdict
from imagekit.report.accepted import Accepted
from imagekit.results import Status

REPORT_SCHEMA_VERSION = 1


class EvidenceLine(BaseModel):
    """One check of one attempt, with the attempt directory it came from.

    `current` is False when a later attempt of the same kind re-ran the same check: the earlier
    line stays in the report as history (evidence is append-only), but no longer decides.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: str
    name: str
    status: Status
    detail: str = ""
    key: str
    attempt_id: str
    finished: dt.datetime
    evidence: str = Field(description="attempt directory, relative to the evidence root")
    current: bool = True
    accepted: str | None = Field(default=None, description="why the spec accepts this non-PASS "
                                 "status (the status itself is kept); None when not accepted")
    signer: str | None = Field(default=None, description="the trusted key that signed the "
                               "statement this line was read from (`ci 3f2a91c0…`); None: "
                               "this store measured it")

    @property
    def test_name(self) -> str:
        """Stable name used in JUnit, in-toto and required-check matching: `kind:name`."""
        return f"{self.kind}:{self.name}"


class RequiredOutcome(BaseModel):
    """A required check (`kind` or `kind:name`) and whether the current evidence satisfies it.

    Missing evidence is never a pass: `status` is None and `satisfied` False then.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    requirement: str
    satisfied: bool
    status: Status | None = None
    reason: str = ""


class EndpointDigest(BaseModel):
    """The digest an image has at one promotion endpoint (staging, production, target…)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    endpoint: str
    reference: str
    digest: str
    verified: bool | None = None
    bytes_moved: int | None = None
    evidence: str
    referrers: int | None = Field(default=None, description="attestations (OCI referrers) "
                                  "the hop carried and read back there; None: not recorded")


class BandwidthPoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    bytes: int
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None


class PreflightSummary(BaseModel):
    """An all-reduce preflight as recorded by the GPU helper (sizes with algbw/busbw)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    status: Status
    world_size: int | None = None
    backend: str | None = None
    sizes: list[BandwidthPoint] = []
    #: the timed checks' repeated cycles: every sample, the median, its interval, the band
    timed: list[NoiseVerdict] = []
    evidence: str
    attempt_id: str


class LatencySeries(BaseModel):
    """Latency percentiles of one acceptance/bench measurement (`p50`, `p90`, `p99`, …)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: str
    label: str
    metric: str = "latency"
    status: Status
    unit: str = ""
    percentiles: dict[str, float]
    evidence: str
    attempt_id: str


class AcceptanceVerdict(BaseModel):
    """One acceptance check with its protocol and semantic verdicts apart (the check's own
    `data["protocol"]` / `data["semantic"]`, imagekit/acceptance/protocol.py). None: that
    aspect was not judged (a capability the engine lacks, a check without a semantic part)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: str
    name: str
    status: Status
    protocol: Status | None = None
    protocol_detail: str = ""
    semantic: Status | None = None
    semantic_detail: str = ""
    #: the answer(s) judged and what was expected (from the check's samples), where it has any
    answer: str = ""
    expected: str = ""
    evidence: str


class JudgedOn(BaseModel):
    """Which model an accept suite's answers were judged on, by which cases: the served name,
    the cases set and the model it was calibrated on, and the served model's file digests
    (where the run could read them: the cluster controller hashes the model volume)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    kind: str
    model: str | None = None
    engine: str | None = None
    cases: str | None = None
    calibrated_on: str | None = None
    model_files: dict[str, str] = {}
    evidence: str


class GoodputPoint(BaseModel):
    """Goodput of one bench round: the share of requests that met every SLO threshold."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    label: str
    goodput: float
    floor: float | None = None
    status: Status
    evidence: str
    #: past saturation: the server fell behind the senders, so the floor was not judged
    saturated: bool = False


class ClusterStart(BaseModel):
    """One engine start of `imagekit cluster accept`: its live phases and how it ended."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    pod: str
    state: str | None = None
    budget_seconds: int
    budget_source: str
    phases: dict[str, float] = Field(default_factory=dict,
                                     description="phase -> seconds since the container started")
    controller: Status | None = None
    evidence: str


class ImageFacts(BaseModel):
    """The image manifest's facts: final versions, base digest, fix layers."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str | None = None
    versions: dict[str, str] = {}
    base_digest: str | None = None
    fix_layers: list[str] = []
    source: str | None = Field(default=None, description="attempt the facts were read from")


class OverrideRecord(BaseModel):
    """A promotion forced past a refusing gate, with the reason someone gave."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    reason: str
    user: str = ""
    refused_for: list[str] = []
    finished: dt.datetime
    evidence: str


class VersionChange(BaseModel):
    """A package version the probes saw that differs from the previous build's (None: the
    package was not there / not found by the versions probe)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    package: str
    before: str | None = None
    after: str | None = None


class StatusChange(BaseModel):
    """A check (`kind:name`) whose current status differs from the previous build's (None:
    that build has no such check)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    check: str
    before: Status | None = None
    after: Status | None = None
    evidence: str = Field(default="", description="this build's attempt of the check")


class PreviousBuild(BaseModel):
    """The difference against the previous build of the same image (same name and profile,
    another digest, built before this one): base digest, versions, checks whose status changed.
    The SBOM difference is `imagekit.sbom.history`'s (it needs the SBOMs of both)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    digest: str
    built: dt.datetime
    evidence: str = Field(description="the previous build's attempt, relative to the root")
    base_before: str | None = None
    base_after: str | None = None
    probed: bool = Field(default=True, description="both builds' versions are known (False: "
                         "one was not probed yet, so `versions` is empty, not 'all removed')")
    versions: list[VersionChange] = []
    checks: list[StatusChange] = []

    @property
    def base_changed(self) -> bool:
        return self.base_before != self.base_after

    @property
    def changed(self) -> list[StatusChange]:
        """Checks both builds ran, with another status now."""
        return [c for c in self.checks if c.before is not None and c.after is not None]

    @property
    def not_run(self) -> list[StatusChange]:
        """Checks the previous build had that this one has not (run yet)."""
        return [c for c in self.checks if c.after is None]

    @property
    def new(self) -> list[StatusChange]:
        """Checks this build has that the previous one never ran."""
        return [c for c in self.checks if c.before is None]


class SignedStatement(BaseModel):
    """One statement a trusted key signed about the image, read from a registry (an
    `attested` attempt): the auditor's chain, phase by phase, each naming its signer."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    phase: str = Field(description="image (test-result, sbom), hops (promotion), cluster "
                       "(cluster-* types), other")
    predicate_type: str
    name: str = Field(description="short name: test-result, promotion, sbom, cluster-probe…")
    signer: str
    fingerprint: str
    registry: str
    repository: str
    referrer: str
    signed_at: str | None = None
    current: bool = Field(default=True, description="False: a newer statement of the same "
                          "type (by its signed time) supersedes it")
    summary: list[str] = Field(default=[], description="what it says, one line per fact")
    hops: list[str] = Field(default=[], description="a promotion statement's hops read back "
                            "and verified, in the order they were made (references)")
    evidence: str = Field(description="the attested attempt directory")


class Counts(BaseModel):
    """The lines a decision rests on, each counted once, in one bucket: accepted checks are
    never inside the PASS count, and a non-PASS the policy does not require is apart from
    the FAILs that refuse."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    passed: int = 0
    accepted: int = Field(default=0, description="non-PASS lines the profile accepts (their "
                          "status kept)")
    failed: int = Field(default=0, description="FAIL lines not accepted")
    errors: int = Field(default=0, description="ERROR lines not accepted")
    deferred: int = Field(default=0, description="DEFERRED lines not accepted (a warning, or "
                          "a refusal where required)")
    not_required: int = Field(default=0, description="non-PASS lines of signed phase "
                              "statements the policy does not require (named, not refusing)")
    blocking: int = Field(default=0, description="what refuses the image: len(blocking)")


class Blocker(BaseModel):
    """One thing that refuses the image: a check line, an unmet required check, or another of
    the gate's reasons (no evidence, a changed signed statement…)."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    source: Literal["check", "required", "gate"]
    test: str = Field(default="", description="`kind:name` of the line, or the requirement")
    status: str = Field(description="FAIL, ERROR, DEFERRED, or MISSING (a required check "
                        "without evidence)")
    reason: str = Field(description="the gate's reason, as `imagekit gate` prints it")
    evidence: str = ""
    signer: str | None = Field(default=None, description="who signed the statement it rests "
                               "on; None: this store measured it")


class AcceptedCheck(BaseModel):
    """A non-PASS status the profile accepts: counted as accepted, with its reason."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    test: str
    status: Status
    reason: str
    signer: str | None = None


class Decision(BaseModel):
    """What a person may do with the image, and why: the first line of every report.

    Derived in one place (`imagekit.report.decision.derive`) from the stored gate decision,
    the evaluated lines (measured here, or signed by a trusted key) and the promotion's hops;
    every format renders this record and nothing else decides, so no two formats disagree."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    verdict: str = Field(description="promoted, promotable or not promotable")
    may_promote: bool = Field(description="the gate allows promoting (or deploying) it")
    level: Literal["go", "caution", "stop"] = Field(
        default="go", description="go: allowed, nothing to say; caution: allowed with "
        "warnings; stop: refused, or an endpoint serves another digest")
    summary: str = Field(description="one sentence: the verdict and why")
    next_step: str = Field(default="", description="the command or action a person takes next")
    points: list[str] = Field(default=[], description="the facts behind the verdict, one "
                              "line each (the banner's list)")
    reasons: list[str] = Field(default=[], description="the facts the verdict rests on")
    destination: str | None = Field(default=None, description="the final promotion "
                                    "destination pinned by digest (never a relay); None "
                                    "when nothing was promoted")
    counts: Counts = Counts()
    required: list[RequiredOutcome] = Field(default=[], description="each required check and "
                                            "whether the lines the gate judged satisfy it")
    blocking: list[Blocker] = []
    accepted: list[AcceptedCheck] = []
    not_required: list[EvidenceLine] = Field(default=[], description="non-PASS lines of "
                                             "signed phase statements no required check "
                                             "covers: named, not refusing")


class ImageReport(BaseModel):
    """Everything the evidence store knows about one image digest, condensed."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    schema_version: int = REPORT_SCHEMA_VERSION
    subject: str
    requested: str = ""
    resolution: str | None = Field(default=None, description="how `requested` became the "
                                   "digest when it was a tag: at the registry, or offline "
                                   "from which evidence record")
    generated: dt.datetime
    evidence_root: str
    status: Status
    aliases: list[str] = []
    profile: str | None = None
    accepted: list[Accepted] = []
    facts: ImageFacts = ImageFacts()
    checks: list[EvidenceLine] = []
    history: list[EvidenceLine] = []
    required: list[RequiredOutcome] = []
    gate: GateDecision = Field(description="the promotion gate's decision, computed once when "
                               "the report was built; every format renders this one")
    endpoints: list[EndpointDigest] = []
    preflight: list[PreflightSummary] = []
    latency: list[LatencySeries] = []
    overrides: list[OverrideRecord] = []
    acceptance: list[AcceptanceVerdict] = []
    judged_on: list[JudgedOn] = []
    goodput: list[GoodputPoint] = []
    cluster_starts: list[ClusterStart] = []
    chain: list[SignedStatement] = Field(default=[], description="statements trusted keys "
                                         "signed about the image (from the registry), "
                                         "never what this machine measured")
    signed_checks: list[EvidenceLine] = Field(
        default=[], description="the tests of the newest trusted test-result, as lines (each "
        "naming its signer), where this store measured no image phase: the gate judged them "
        "beside `checks`")
    signed_phases: list[EvidenceLine] = Field(
        default=[], description="the checks of the newest trusted statement of each later "
        "phase (cluster-probe, cluster-accept, gpu-preflight…) this store did not measure: "
        "a non-PASS refuses where a required check covers it, else it is named")
    decision: Decision | None = Field(default=None, exclude=True, description="the JSON "
                                      "report's first key: derived from the rest when it "
                                      "is written (imagekit.report.decision.derive), dropped "
                                      "when read")
    previous: PreviousBuild | None = Field(default=None, description="the difference against "
                                           "the previous build of the same image; None when "
                                           "the evidence holds no earlier build of it")

    @model_validator(mode="before")
    @classmethod
    def _derived_decision(cls, data: Any) -> Any:
        """The JSON report leads with `decision`, derived from the rest: reading it back drops
        it (it is recomputed, never trusted from the file)."""
        if isinstance(data, dict) and "decision" in data:
            data = {k: v for k, v in data.items() if k != "decision"}
        return data

    def kinds(self) -> list[str]:
        seen: list[str] = []
        for line in self.checks:
            if line.kind not in seen:
                seen.append(line.kind)
        return seen

    def summary(self) -> list[dict]:
        """Per evidence kind: counts of current statuses (accepted ones apart), and the latest
        attempt directory."""
        rows = []
        for kind in self.kinds():
            lines = [line for line in self.checks if line.kind == kind]
            row: dict = {"kind": kind, "accepted": sum(1 for x in lines if x.accepted)}
            for status in Status:
                row[status.value] = sum(1 for x in lines
                                        if x.status is status and not x.accepted)
            row["evidence"] = max(lines, key=lambda x: x.finished).evidence
            rows.append(row)
        return rows
