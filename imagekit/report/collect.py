"""Build an `ImageReport` from the evidence store: typed projections of each kind's result.

Every attempt is read through the evidence contract (`imagekit.evidence`): its subjects (digests
with roles) and its result model (`EvidenceStore.result`). Check lines come from what every
attempt has (kind, status, checks); each report section is a projection of one or more kinds'
models (docs/design/evidence.md lists them). Nothing is guessed: a section without evidence stays
empty.

Which attempts belong to an image: those whose judged subjects (role `subject` or `alias`)
include its digest or one of its aliases — a build names the pushed digest and the image ID, so
probes keyed by the image ID join. A digest an attempt only compared itself with
(verify-copy's official) or was built from (a base) is never judged by it.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import EvidenceError, NotFound
from imagekit.evidence import AttemptRecord, EvidenceResult, EvidenceStore, Subject, judged
from imagekit.evidence.kinds import (
    AcceptResult,
    BenchResult,
    BuildResult,
    ClusterAcceptResult,
    GateOverrideResult,
    GpuPreflightResult,
    ImagesVerifyResult,
    ProbeResult,
    PromoteEvidence,
)
from imagekit.oci.digest import Digest
from imagekit.report.accepted import Accepted, from_spec, image_and_profile, match
from imagekit.report.decision import (
    evaluate_required,
    gate_of,
    overall_status,
    rank,
    worst,
)
from imagekit.report.models import (
    AcceptanceVerdict,
    BandwidthPoint,
    ClusterStart,
    EndpointDigest,
    EvidenceLine,
    GoodputPoint,
    ImageFacts,
    ImageReport,
    JudgedOn,
    LatencySeries,
    OverrideRecord,
    PreflightSummary,
)
from imagekit.report.previous import previous_build
from imagekit.report.required import current_kind, parse_requirements
from imagekit.results import Status

#: Kinds that are about the gate or the report itself, not checks of the image; and `attested`:
#: statements another machine signed (imagekit.report.trusted decides from those, apart).
GATE_KINDS = frozenset({"gate-override", "report", "attested"})
#: A check line standing for an attempt that recorded no checks (e.g. it raised).
ATTEMPT_LINE = "attempt"


@dataclass(frozen=True)
class Read:
    """One attempt as the contract gives it: the record, its subjects, its result model."""

    record: AttemptRecord
    subjects: tuple[Subject, ...]
    result: EvidenceResult | None

    @property
    def judged(self) -> set[str]:
        return judged(self.subjects)


# -- reading the store -----------------------------------------------------------------------

def all_records(store: EvidenceStore) -> list[AttemptRecord]:
    """Every finished attempt in the store. An attempt.json that cannot be read is an error
    (EvidenceError naming the key), never silently skipped: the verdict would be incomplete."""
    records = []
    for key in store.keys():  # noqa: SIM118 - EvidenceStore.keys() is a method, not a dict
        try:
            # keys() says `name:<slug>` but attempts() wants the bare slug for names
            records.extend(store.attempts(key.removeprefix("name:")))
        except (ValueError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EvidenceError(f"unreadable evidence ({first})",
                                where=str(store.root / key.replace(":", "/", 1))) from None
    return records


def read_all(store: EvidenceStore) -> list[Read]:
    """Every attempt with its subjects and typed result (EvidenceError when one's result does
    not match its kind's model)."""
    return [Read(record, tuple(store.subjects(record)), store.result(record))
            for record in all_records(store)]


def related(store: EvidenceStore, digest: Digest | str,
            reads: list[Read] | None = None) -> tuple[set[str], list[Read]]:
    """The image's aliases (its digests) and every attempt about it, oldest first."""
    aliases = {str(Digest.parse(str(digest)))}
    reads = read_all(store) if reads is None else reads
    changed = True
    while changed:
        changed = False
        for read in reads:
            found = read.judged
            if found & aliases and not found <= aliases:
                aliases |= found
                changed = True
    mine = [read for read in reads if read.judged & aliases]
    return aliases, sorted(mine, key=lambda r: (r.record.started, r.record.attempt_id))


# -- check lines -----------------------------------------------------------------------------

def _relpath(store: EvidenceStore, record: AttemptRecord) -> str:
    return str(store.path_of(record).relative_to(store.root))


def lines_of(store: EvidenceStore, record: AttemptRecord) -> list[EvidenceLine]:
    """One line per check; an attempt without checks (or worse than its checks) gets a line of
    its own, so an attempt that broke is never silently absent."""
    where = _relpath(store, record)
    common = dict(kind=current_kind(record.kind), key=record.key, attempt_id=record.attempt_id,
                  finished=record.finished, evidence=where)
    lines = [EvidenceLine(name=c.name, status=c.status, detail=c.detail, **common)
             for c in record.checks]
    worst_check = worst([c.status for c in record.checks])
    if not record.checks or rank(record.status) < rank(worst_check):
        lines.append(EvidenceLine(name=ATTEMPT_LINE, status=record.status,
                                  detail=record.summary or "attempt recorded no checks",
                                  **common))
    return lines


def current_and_history(store: EvidenceStore, records: list[AttemptRecord]
                        ) -> tuple[list[EvidenceLine], list[EvidenceLine]]:
    """The latest line per (kind, check name) decides; older ones are history.

    A check-less `attempt` line is superseded by any later attempt of the same kind: a rerun that
    ran its checks replaces an attempt that broke before it could.
    """
    latest: dict[tuple[str, str], EvidenceLine] = {}
    every: list[EvidenceLine] = []
    last_of_kind: dict[str, AttemptRecord] = {}
    for record in records:
        if record.kind in GATE_KINDS:
            continue
        last_of_kind[current_kind(record.kind)] = record
        for line in lines_of(store, record):
            every.append(line)
            latest[(line.kind, line.name)] = line
    current, history = [], []
    for line in every:
        is_latest = latest[(line.kind, line.name)] is line
        if line.name == ATTEMPT_LINE and last_of_kind[line.kind].attempt_id != line.attempt_id:
            is_latest = False
        if is_latest:
            current.append(line)
        else:
            history.append(line.model_copy(update={"current": False}))
    return current, history


# -- projections of the kinds' result models -------------------------------------------------

def _registry_names(state_dir: Path | None = None) -> dict[str, str]:
    """host:port -> endpoint name (staging/production/target) from the infra state in
    `state_dir` (default /var/lib/imagekit), when there is one; the report works without it
    (the address is the label then)."""
    try:
        from imagekit.infra.state import load_state
        return {r.address: name for name, r in load_state(state_dir).registries.items()}
    except Exception:  # noqa: BLE001 - no infra here is normal for a report
        return {}


def _registry_of(reference: str) -> str:
    return reference.split("/", 1)[0] if "/" in reference else reference


def endpoints_of(store: EvidenceStore, reads: list[Read],
                 state_dir: Path | None = None) -> list[EndpointDigest]:
    """The digest at every endpoint: where the build pushed it (BuildResult.reference; not read
    back, so verified unknown), the promotion's source (unknown) and each hop (HopEvidence:
    verified = read back and hashed there). The latest attempt wins per reference.
    `state_dir`: infra's state, whose registries name the endpoints."""
    names: dict[str, str] | None = None
    found: dict[str, EndpointDigest] = {}

    def put(reference: str, registry: str, digest: str, verified: bool | None,
            moved: int | None, where: str, referrers: int | None = None) -> None:
        nonlocal names
        if names is None:
            names = _registry_names(state_dir)
        label = f"{names[registry]} ({registry})" if registry in names else registry
        found[reference] = EndpointDigest(endpoint=label, reference=reference, digest=digest,
                                          verified=verified, bytes_moved=moved, evidence=where,
                                          referrers=referrers)

    for read in reads:
        result, where = read.result, _relpath(store, read.record)
        if isinstance(result, BuildResult) and result.reference and result.digest:
            put(result.reference, _registry_of(result.reference), result.digest, None, None,
                where)
        elif isinstance(result, PromoteEvidence):
            if result.source and result.digest and result.hops:
                put(result.source, _registry_of(result.source), result.digest, None, None,
                    where)
            for hop in result.hops:
                put(hop.endpoint, hop.registry, hop.digest, hop.verified, hop.bytes_moved, where,
                    len(hop.referrers) if hop.referrers is not None
                    else _legacy_referrers(hop.read_back))
    return list(found.values())


def _legacy_referrers(read_back: str) -> int | None:
    """For records written before HopEvidence.referrers: the count from the read-back text
    (`N referrers listed and served`, or `0 referrers`); None when the hop predates them."""
    import re
    found = re.search(r"\b(\d+) referrers\b", read_back or "")
    return int(found.group(1)) if found else None


def preflight_of(store: EvidenceStore, reads: list[Read]) -> list[PreflightSummary]:
    """All-reduce tables of gpu-preflight results (a Pod-only preflight has none)."""
    return [PreflightSummary(
        status=read.record.status, world_size=read.result.world_size,
        backend=read.result.backend,
        sizes=[BandwidthPoint(bytes=s.bytes, algbw_GBps=s.algbw_GBps, busbw_GBps=s.busbw_GBps)
               for s in sorted(read.result.sizes, key=lambda s: s.bytes)],
        timed=list(read.result.timed),
        evidence=_relpath(store, read.record), attempt_id=read.record.attempt_id)
        for read in reads
        if isinstance(read.result, GpuPreflightResult) and read.result.sizes]


def latency_of(store: EvidenceStore, reads: list[Read]) -> list[LatencySeries]:
    """Latency percentiles of acceptance and bench results, with their explicit units."""
    return [LatencySeries(kind=read.record.kind, label=series.label, metric=series.metric,
                          status=read.record.status, unit=series.unit,
                          percentiles=series.percentiles,
                          evidence=_relpath(store, read.record),
                          attempt_id=read.record.attempt_id)
            for read in reads if isinstance(read.result, (AcceptResult, BenchResult))
            for series in sorted(read.result.latency, key=lambda s: (s.label, s.metric))]


def _known(versions: dict[str, str | None]) -> dict[str, str]:
    return {k: v for k, v in versions.items() if v is not None}


def facts_of(store: EvidenceStore, reads: list[Read]) -> ImageFacts:
    """Final versions, base digest and fix layers: the latest images-verify result, else the
    latest probe (versions) and build (base digest)."""
    verified = [(r, r.result) for r in reversed(reads) if isinstance(r.result, ImagesVerifyResult)]
    probes = [(r, r.result) for r in reversed(reads) if isinstance(r.result, ProbeResult)]
    builds = [(r, r.result) for r in reversed(reads) if isinstance(r.result, BuildResult)]
    versions: dict[str, str] = {}
    source = base = None
    fixes: list[str] = []
    with_versions: list[tuple[Read, ImagesVerifyResult | ProbeResult]] = [*verified, *probes]
    for read, found in with_versions:
        versions = _known(found.versions)
        if versions:
            source = _relpath(store, read.record)
            break
    with_base: list[tuple[Read, ImagesVerifyResult | BuildResult]] = [*verified, *builds]
    for _, built in with_base:
        base = built.base_digest
        if base:
            break
    for _, checked in verified:
        if checked.fix_layers:
            fixes = list(checked.fix_layers)
            break
    name = image_and_profile([r.result for r in reads])[0]
    return ImageFacts(name=name, versions=versions, base_digest=base, fix_layers=fixes,
                      source=source)


def overrides_of(store: EvidenceStore, reads: list[Read]) -> list[OverrideRecord]:
    return [OverrideRecord(reason=read.result.reason, user=read.result.user,
                           refused_for=list(read.result.refused_for),
                           finished=read.record.finished, evidence=_relpath(store, read.record))
            for read in reads if isinstance(read.result, GateOverrideResult)]


def _aspect(data: dict, key: str) -> tuple[Status | None, str]:
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, dict) or value.get("status") not in Status._value2member_map_:
        return None, ""
    return Status(value["status"]), str(value.get("detail") or "")


def _judged(data: dict) -> tuple[str, str]:
    """(answers, expected) of a check's samples, each distinct value once."""
    samples = data.get("samples") if isinstance(data, dict) else None
    if not isinstance(samples, list):
        return "", ""
    rows = [s for s in samples if isinstance(s, dict) and "answer" in s]
    answers = list(dict.fromkeys(" ".join(str(s["answer"]).split())[:80] for s in rows))
    expected = list(dict.fromkeys(str(s.get("expected", "")) for s in rows
                                  if s.get("expected") not in (None, "")))
    return " / ".join(repr(a) for a in answers)[:300], " / ".join(expected)[:120]


def judged_on_of(store: EvidenceStore, reads: list[Read]) -> list[JudgedOn]:
    """The model and cases of the latest attempt per accept-* kind that judged answers."""
    latest: dict[str, Read] = {}
    for read in reads:
        if isinstance(read.result, AcceptResult) and read.result.cases:
            latest[read.record.kind] = read
    return [JudgedOn(kind=kind, model=read.result.model, engine=read.result.engine,
                     cases=read.result.cases, calibrated_on=read.result.cases_calibrated_on,
                     model_files=read.result.model_files,
                     evidence=_relpath(store, read.record))
            for kind, read in latest.items() if isinstance(read.result, AcceptResult)]


def acceptance_of(store: EvidenceStore, reads: list[Read]) -> list[AcceptanceVerdict]:
    """Protocol and semantic verdicts of every check of the latest attempt per accept-* kind
    (checks without either aspect, e.g. a suite total, keep both None)."""
    latest: dict[str, Read] = {}
    for read in reads:
        if isinstance(read.result, AcceptResult):
            latest[read.record.kind] = read
    found = []
    for kind, read in latest.items():
        where = _relpath(store, read.record)
        for check in read.record.checks:
            protocol, protocol_detail = _aspect(check.data, "protocol")
            semantic, semantic_detail = _aspect(check.data, "semantic")
            answer, expected = _judged(check.data) if semantic is not None else ("", "")
            found.append(AcceptanceVerdict(
                kind=kind, name=check.name, status=check.status, protocol=protocol,
                protocol_detail=protocol_detail[:300], semantic=semantic,
                semantic_detail=semantic_detail[:300], answer=answer, expected=expected,
                evidence=where))
    return found


def cluster_starts_of(store: EvidenceStore, reads: list[Read]) -> list[ClusterStart]:
    """Every engine start of `cluster accept` (retries too), with its live phases."""
    return [ClusterStart(pod=read.result.engine_pod,
                         state=read.result.startup.state if read.result.startup else None,
                         budget_seconds=read.result.startup_budget_seconds,
                         budget_source=read.result.budget_source,
                         phases={p.name: p.seconds for p in read.result.phases},
                         controller=read.result.controller,
                         evidence=_relpath(store, read.record))
            for read in reads if isinstance(read.result, ClusterAcceptResult)]


def goodput_of(store: EvidenceStore, reads: list[Read]) -> list[GoodputPoint]:
    """Goodput per round of the latest bench attempt (a round check's data is its
    RoundResult: `goodput`, and the SLO floor under `spec.slo.goodput_floor`)."""
    benches = [r for r in reads if isinstance(r.result, BenchResult)]
    if not benches:
        return []
    read = benches[-1]
    points = []
    for check in read.record.checks:
        value = check.data.get("goodput") if isinstance(check.data, dict) else None
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        raw_spec = check.data.get("spec")
        spec: dict = raw_spec if isinstance(raw_spec, dict) else {}
        raw_slo = spec.get("slo")
        slo: dict = raw_slo if isinstance(raw_slo, dict) else {}
        floor = slo.get("goodput_floor")
        points.append(GoodputPoint(label=check.name, goodput=float(value),
                                   floor=float(floor) if isinstance(floor, (int, float))
                                   else None, status=check.status,
                                   evidence=_relpath(store, read.record),
                                   saturated=check.data.get("saturated") is True))
    return points


#: The evidence kind of the provenance check lines (`provenance:subject`, `:base`,
#: `:dockerfile`): judged at report time from the build's recorded statement and the spec.
PROVENANCE_KIND = "provenance"


@dataclass(frozen=True)
class RecordedProvenance:
    """BuildKit's statement a build of the image recorded (`provenance.json`, bytes as BuildKit
    wrote them), with the build that pushed the digest it is about."""

    read: Read
    build: BuildResult
    path: Path
    evidence: str

    @property
    def digest(self) -> Digest:
        return Digest.parse(str(self.build.digest))

    @property
    def repository(self) -> str:
        """The pushed repository (`host/path`): the name the signed statement's subject gets."""
        from imagekit.oci import ImageReference

        pushed = ImageReference.parse(str(self.build.reference))
        return f"{pushed.registry}/{pushed.repository}"

    def data(self) -> bytes:
        """The statement's bytes (InvalidInput when the file cannot be read)."""
        from imagekit.inputs import read_bytes
        from imagekit.provenance.slsa import MAX_STATEMENT_BYTES

        return read_bytes(self.path, "the build's provenance", max_bytes=MAX_STATEMENT_BYTES)


def recorded_provenance(store: EvidenceStore, digest: Digest | str,
                        reads: list[Read] | None = None) -> RecordedProvenance | None:
    """The provenance the newest build that pushed `digest` recorded (`reads`: the image's
    attempts, else read from the store); None when no build of it recorded one (built without
    `--attest type=provenance`)."""
    from imagekit.provenance import PROVENANCE_FILE

    wanted = str(Digest.parse(str(digest)))
    reads = related(store, wanted)[1] if reads is None else reads
    for read in reversed(reads):
        if not isinstance(read.result, BuildResult) or read.result.digest != wanted or \
                not read.result.reference:
            continue
        path = store.path_of(read.record) / PROVENANCE_FILE
        if path.is_file():
            return RecordedProvenance(read=read, build=read.result, path=path,
                                      evidence=_relpath(store, read.record))
    return None


def provenance_lines(store: EvidenceStore, reads: list[Read], aliases: set[str],
                     spec_path: Path | None = None) -> list[EvidenceLine]:
    """The provenance check (imagekit.provenance) of the digest the image's newest build pushed,
    against the images spec's lock and Dockerfile of the image and profile that build names.
    No line when no build recorded a provenance (`provenance` as a required check makes
    that refuse)."""
    from imagekit.errors import InvalidInput
    from imagekit.provenance import judge_provenance, signed_statement
    from imagekit.results import CheckResult

    pushed = [r.result.digest for r in reversed(reads) if isinstance(r.result, BuildResult)
              and r.result.digest and r.result.digest in aliases]
    found = recorded_provenance(store, pushed[0], reads) if pushed else None
    if found is None:
        return []
    try:
        statement = signed_statement(found.data(), found.digest, found.repository)
        checks = judge_provenance(statement, found.digest, image=found.build.name,
                                  profile=found.build.profile, spec_path=spec_path,
                                  subject_note="recorded by the build that pushed it")
    except InvalidInput as exc:
        checks = [CheckResult(name="subject", status=Status.FAIL,
                              detail=f"the build's provenance.json: {exc.one_line()}"[:500])]
    record = found.read.record
    return [EvidenceLine(kind=PROVENANCE_KIND, name=c.name, status=c.status, detail=c.detail,
                         key=record.key, attempt_id=record.attempt_id, finished=record.finished,
                         evidence=found.evidence) for c in checks]


def apply_accepted(lines: list[EvidenceLine], accepted: list[Accepted]) -> list[EvidenceLine]:
    result = []
    for line in lines:
        entry = match(line.kind, line.name, line.status, accepted)
        result.append(line.model_copy(update={"accepted": f"{entry.reason} ({entry.source})"})
                      if entry else line)
    return result


def build_report(store: EvidenceStore, digest: Digest | str, *,
                 required: Iterable[str] | None = None, requested: str = "",
                 name: str | None = None, profile: str | None = None,
                 accepted: list[Accepted] | None = None,
                 resolution: str | None = None, reads: list[Read] | None = None,
                 with_previous: bool = True, spec_path: Path | None = None,
                 state_dir: Path | None = None) -> ImageReport:
    """The report of one image digest, with its gate decision computed once and stored.
    NotFound when the store has no attempt about it.

    `accepted`: statuses accepted for this image; by default those of the images spec
    (`spec_path`, else the default spec) for the image and profile the evidence names
    (`profile` overrides the evidence's). `reads`: the whole store already read (the previous
    build's report reuses it). `state_dir`: infra's state, whose registries name the
    endpoints. The CLI passes both from its settings ($IMAGEKIT_IMAGES_SPEC,
    $IMAGEKIT_STATE_DIR)."""
    digest = Digest.parse(str(digest))
    requirements = parse_requirements(required)
    everything = read_all(store) if reads is None else reads
    aliases, reads = related(store, digest, everything)
    if not reads:
        raise NotFound(f"no evidence for {digest}", where=str(store.root))
    image, recorded_profile = image_and_profile([r.result for r in reads])
    profile = profile or recorded_profile
    if accepted is None:
        accepted = from_spec(name or image, profile, spec_path)
    records = [r.record for r in reads]
    current, history = current_and_history(store, records)
    current = [*current, *provenance_lines(store, reads, aliases, spec_path)]
    current, history = apply_accepted(current, accepted), apply_accepted(history, accepted)
    outcomes = evaluate_required(current, requirements)
    facts = facts_of(store, reads)
    if name and not facts.name:
        facts = facts.model_copy(update={"name": name})
    report = ImageReport(
        subject=str(digest), requested=requested or str(digest), resolution=resolution,
        generated=dt.datetime.now(dt.UTC), evidence_root=str(store.root),
        status=overall_status(current, outcomes),
        aliases=sorted(aliases - {str(digest)}), profile=profile, accepted=accepted,
        facts=facts, checks=current, history=history,
        required=outcomes, gate=gate_of(str(digest), current, outcomes),
        endpoints=endpoints_of(store, reads, state_dir), preflight=preflight_of(store, reads),
        latency=latency_of(store, reads), overrides=overrides_of(store, reads),
        acceptance=acceptance_of(store, reads), judged_on=judged_on_of(store, reads),
        goodput=goodput_of(store, reads),
        cluster_starts=cluster_starts_of(store, reads))
    if with_previous:  # the difference against the previous build of the same image
        build = functools.partial(build_report, spec_path=spec_path, state_dir=state_dir)
        report = report.model_copy(update={"previous": previous_build(
            store, everything, report, build)})
    return report


def evidence_file(report: ImageReport, line: EvidenceLine) -> Path:
    """The attempt.json a line came from (absolute)."""
    return Path(report.evidence_root) / line.evidence / "attempt.json"
