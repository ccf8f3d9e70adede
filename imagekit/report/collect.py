"""Build an `ImageReport` from the evidence store, generically on `AttemptRecord`s.

Other operations write evidence with their own file names and data shapes; this module reads
only what every attempt has (kind, status, checks, context, files) and then, opportunistically,
the JSON files of an attempt: a shape it recognises (per-hop promotion digests, all-reduce sizes,
latency percentiles, final versions) fills a section, anything else is ignored. A section with
no evidence stays empty, it is never invented.

Which attempts belong to an image: those keyed by its digest, plus those (keyed by a name or by
another digest of the same image, e.g. the image ID) whose identity fields name that digest —
see `IDENTITY_FIELDS`. A base image's digest is never an identity of the image built on it.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from imagekit.errors import EvidenceError, NotFound
from imagekit.evidence import AttemptRecord, EvidenceStore
from imagekit.oci.digest import Digest
from imagekit.report.accepted import Accepted, from_spec, image_and_profile, match
from imagekit.report.models import (
    BandwidthPoint,
    EndpointDigest,
    EvidenceLine,
    ImageFacts,
    ImageReport,
    LatencySeries,
    OverrideRecord,
    PreflightSummary,
    RequiredOutcome,
)
from imagekit.report.required import Requirement, parse_requirements
from imagekit.results import Status

#: Context/data keys whose digest value *is* the image (not its base, not a layer).
IDENTITY_FIELDS = ("digest", "image_digest", "image_id", "config_digest", "manifest_digest",
                   "registry_digest", "local_digest", "pushed_digest", "staging_digest")
#: Kinds whose JSON files name the image they are about at top level (imagekit.build's
#: build.json: image_id + digest), read to link an image ID to its pushed digest.
IDENTITY_FILE_KINDS = frozenset({"build"})
#: Kinds that are about the gate or the report itself, not checks of the image.
GATE_KINDS = frozenset({"gate-override", "report"})
#: Kinds whose data carries the image manifest's facts (versions, base, fix layers).
FACT_KINDS = frozenset({"images-verify", "build", "probe"})
#: A check line standing for an attempt that recorded no checks (e.g. it raised).
ATTEMPT_LINE = "attempt"
#: Bigger JSON files are raw exchanges (e.g. base64 media), never a summary this module reads.
_MAX_JSON_BYTES = 2 * 1024 * 1024
_PERCENTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?|100)$")


# -- which attempts belong to the image ------------------------------------------------------

def _digest_of(value: Any) -> str | None:
    if isinstance(value, str) and value.startswith(("sha256:", "sha512:")):
        try:
            return str(Digest.parse(value))
        except Exception:  # noqa: BLE001 - a malformed value is just not an identity
            return None
    return None


def identities(record: AttemptRecord, store: EvidenceStore | None = None) -> set[str]:
    """Digests that name the image this attempt is about: its key, identity fields of its
    context and — for a build, whose record file names both the image ID and the pushed
    digest — the top-level identity fields of its JSON files."""
    found = set()
    if record.key.startswith(("sha256:", "sha512:")):
        found.add(record.key)
    documents: list[Any] = [record.context]
    if store is not None and record.kind in IDENTITY_FILE_KINDS:
        documents += [doc for name, doc in _json_files(store, record)]
    for document in documents:
        if not isinstance(document, dict):
            continue
        for field in IDENTITY_FIELDS:
            digest = _digest_of(document.get(field))
            if digest:
                found.add(digest)
    return found


def all_records(store: EvidenceStore) -> list[AttemptRecord]:
    """Every finished attempt in the store. An attempt.json that cannot be read is an error
    (EvidenceError naming the key), never silently skipped: the verdict would be incomplete."""
    records = []
    for key in store.keys():
        try:
            # keys() says `name:<slug>` but attempts() wants the bare slug for names
            records.extend(store.attempts(key.removeprefix("name:")))
        except (ValueError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EvidenceError(f"unreadable evidence ({first})",
                                where=str(store.root / key.replace(":", "/", 1))) from None
    return records


def mentions(store: EvidenceStore, record: AttemptRecord, aliases: set[str]) -> bool:
    """Whether some part of the record's data names one of `aliases` in an identity field
    (a record about several images, e.g. one images-verify run over the whole spec)."""
    for document in _json_documents(store, record):
        for _, item in _walk(document):
            if any(_digest_of(item.get(f)) in aliases for f in IDENTITY_FIELDS):
                return True
    return False


def related(store: EvidenceStore, digest: Digest | str,
            records: list[AttemptRecord] | None = None) -> tuple[set[str], list[AttemptRecord]]:
    """The image's aliases (its digests) and every attempt about it, oldest first."""
    aliases = {str(Digest.parse(str(digest)))}
    records = all_records(store) if records is None else records
    ids = [(record, identities(record, store)) for record in records]
    changed = True
    while changed:
        changed = False
        for _, found in ids:
            if found & aliases and not found <= aliases:
                aliases |= found
                changed = True
    mine = [record for record, found in ids if found & aliases]
    return aliases, sorted(mine, key=lambda r: (r.started, r.attempt_id))


# -- check lines -----------------------------------------------------------------------------

def _relpath(store: EvidenceStore, record: AttemptRecord) -> str:
    return str(store.path_of(record).relative_to(store.root))


def lines_of(store: EvidenceStore, record: AttemptRecord) -> list[EvidenceLine]:
    """One line per check; an attempt without checks (or worse than its checks) gets a line of
    its own, so an attempt that broke is never silently absent."""
    where = _relpath(store, record)
    common = dict(kind=record.kind, key=record.key, attempt_id=record.attempt_id,
                  finished=record.finished, evidence=where)
    lines = [EvidenceLine(name=c.name, status=c.status, detail=c.detail, **common)
             for c in record.checks]
    worst = _worst([c.status for c in record.checks])
    if not record.checks or _rank(record.status) < _rank(worst):
        lines.append(EvidenceLine(name=ATTEMPT_LINE, status=record.status,
                                  detail=record.summary or "attempt recorded no checks",
                                  **common))
    return lines


_ORDER = [Status.ERROR, Status.FAIL, Status.DEFERRED, Status.PASS]


def _rank(status: Status | None) -> int:
    return _ORDER.index(status) if status in _ORDER else len(_ORDER)


def _worst(statuses: Iterable[Status]) -> Status | None:
    statuses = list(statuses)
    return min(statuses, key=_rank) if statuses else None


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
        last_of_kind[record.kind] = record
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


def evaluate_required(current: list[EvidenceLine], requirements: list[Requirement]
                      ) -> list[RequiredOutcome]:
    outcomes = []
    for requirement in requirements:
        matching = [line for line in current if requirement.matches(line.kind, line.name)]
        if not matching:
            outcomes.append(RequiredOutcome(
                requirement=str(requirement), satisfied=False, status=None,
                reason="no evidence: a missing required check is not a pass"))
            continue
        worst = _worst(line.status for line in matching)
        bad = [line for line in matching if line.status is not Status.PASS]
        reason = "; ".join(f"{line.test_name} {line.status.value}"
                           + (f" (accepted: {line.accepted})" if line.accepted else
                              f": {line.detail}" if line.detail else "") for line in bad)
        outcomes.append(RequiredOutcome(requirement=str(requirement),
                                        satisfied=not [x for x in bad if not x.accepted],
                                        status=worst, reason=reason[:500]))
    return outcomes


def overall_status(current: list[EvidenceLine], required: list[RequiredOutcome]) -> Status:
    """Worst current status (a line the spec accepts counts as DEFERRED: a warning); a missing
    or non-passing required check makes it at least FAIL (DEFERRED on a required check is not a
    pass). No evidence at all is ERROR."""
    if not current:
        return Status.ERROR
    status = _worst(Status.DEFERRED if line.accepted else line.status
                    for line in current) or Status.ERROR
    if any(not outcome.satisfied for outcome in required) and _rank(status) > _rank(Status.FAIL):
        status = Status.FAIL
    return status


# -- opportunistic reading of attempt data ---------------------------------------------------

def _json_files(store: EvidenceStore, record: AttemptRecord) -> Iterator[tuple[str, Any]]:
    """(relative path, parsed value) of each JSON file the attempt kept (size-capped)."""
    base = store.path_of(record)
    for entry in record.files:
        if not entry.path.endswith(".json") or entry.size > _MAX_JSON_BYTES:
            continue
        try:
            yield entry.path, json.loads((base / entry.path).read_text())
        except (OSError, ValueError):
            continue


def _json_documents(store: EvidenceStore, record: AttemptRecord) -> Iterator[Any]:
    """The attempt's context, check data, then each JSON file it kept."""
    yield record.context
    for check in record.checks:
        if check.data:
            yield check.data
    for _, document in _json_files(store, record):
        yield document


def _walk(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict]]:
    """Every dict inside a JSON value, with the keys leading to it."""
    if isinstance(value, dict):
        yield path, value
        for key, item in value.items():
            yield from _walk(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, str(index)))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    return None


def _registry_names() -> dict[str, str]:
    """host:port -> endpoint name (staging/production/target) from the infra state, when there
    is one; the report works without it (the address is the label then)."""
    try:
        from imagekit.infra.state import load_state
        return {r.address: name for name, r in load_state().registries.items()}
    except Exception:  # noqa: BLE001 - no infra here is normal for a report
        return {}


def endpoints_of(store: EvidenceStore, records: list[AttemptRecord]) -> list[EndpointDigest]:
    """The digest at every endpoint: where the build pushed it (build.json `reference`), the
    promotion's source and each hop (imagekit.promote's HopRecord: endpoint = the reference
    pushed to, registry = host:port, verified = read back and hashed there).

    The latest attempt wins per reference; a hop not verified is listed as such; a push or a
    source that was not read back has verified = None (unknown), never True.
    """
    names: dict[str, str] | None = None
    found: dict[str, EndpointDigest] = {}
    for record in records:
        if record.kind not in ("promote", "build"):
            continue
        where = _relpath(store, record)
        for document in _json_documents(store, record):
            for _, item in _walk(document):
                digest = _digest_of(item.get("digest"))
                reference = item.get("reference") or item.get("ref") or item.get("endpoint")
                if record.kind == "promote" and not reference and "hops" in item:
                    reference = item.get("source")            # PromoteResult.source
                if not digest or not isinstance(reference, str) or not reference:
                    continue
                registry = item.get("registry")
                if not isinstance(registry, str) or not registry:
                    registry = reference.split("/", 1)[0] if "/" in reference else reference
                if names is None:
                    names = _registry_names()
                label = f"{names[registry]} ({registry})" if registry in names else registry
                if isinstance(item.get("endpoint"), str) and "/" not in item["endpoint"]:
                    label = item["endpoint"]          # an endpoint given by name
                verified = item.get("verified")
                moved = item.get("bytes_moved")
                known = found.get(reference)
                if known is not None and known.evidence == where and \
                        known.verified is not None and not isinstance(verified, bool):
                    continue                  # the same attempt already said more about it
                found[reference] = EndpointDigest(
                    endpoint=label, reference=reference, digest=digest,
                    verified=verified if isinstance(verified, bool) else None,
                    bytes_moved=moved if isinstance(moved, int) and not isinstance(moved, bool)
                    else None,
                    evidence=where)
    return list(found.values())


def preflight_of(store: EvidenceStore, records: list[AttemptRecord]) -> list[PreflightSummary]:
    """All-reduce tables from gpu-preflight attempts: a dict whose `sizes` is a list of dicts
    with `bytes` (and algbw/busbw in GB/s)."""
    result = []
    for record in records:
        if record.kind != "gpu-preflight":
            continue
        where = _relpath(store, record)
        for document in _json_documents(store, record):
            table = next((item for _, item in _walk(document)
                          if isinstance(item.get("sizes"), list) and item["sizes"]
                          and all(isinstance(s, dict) and "bytes" in s for s in item["sizes"])),
                         None)
            if table is None:
                continue
            points = []
            for size in table["sizes"]:
                if not isinstance(size.get("bytes"), int):
                    continue
                points.append(BandwidthPoint(
                    bytes=size["bytes"],
                    algbw_GBps=_number(size.get("algbw_GBps", size.get("algbw"))),
                    busbw_GBps=_number(size.get("busbw_GBps", size.get("busbw")))))
            outer = document if isinstance(document, dict) else {}
            world = next((v for v in (table.get("world_size"), outer.get("world_size"),
                                      table.get("n"), record.context.get("world_size"))
                          if isinstance(v, int) and not isinstance(v, bool)), None)
            backend = next((v for v in (table.get("backend"), outer.get("backend"),
                                        record.context.get("backend")) if isinstance(v, str)),
                           None)
            result.append(PreflightSummary(
                status=record.status, world_size=world if isinstance(world, int) else None,
                backend=backend if isinstance(backend, str) else None,
                sizes=sorted(points, key=lambda p: p.bytes), evidence=where,
                attempt_id=record.attempt_id))
            break
    return result


def _is_latency_kind(kind: str) -> bool:
    return kind.startswith("accept") or kind.startswith("bench")


def _unit_of(path: tuple[str, ...], item: dict) -> str:
    unit = item.get("unit")
    if isinstance(unit, str):
        return unit
    text = "_".join(path).lower()
    for suffix, name in (("_ms", "ms"), ("_us", "us"), ("_seconds", "s"), ("_s", "s")):
        if text.endswith(suffix) or f"{suffix}_" in text:
            return name
    if _is_latency_stats(item):
        return "s"
    return ""


def _is_latency_stats(item: dict) -> bool:
    """imagekit.acceptance's LatencyStats (percentiles in seconds), when that package is here."""
    try:
        from imagekit.acceptance.models import LatencyStats
    except ImportError:
        return False
    try:
        LatencyStats.model_validate(item)
    except ValueError:
        return False
    return True


def _document_label(document: Any) -> str:
    """A bench round's name (`round-03-image-c4`), or the document's own name, or ''."""
    if not isinstance(document, dict):
        return ""
    spec = document.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("index"), int):
        parts = [f"round-{spec['index']:02d}"]
        if isinstance(spec.get("modality"), str):
            parts.append(spec["modality"])
        if isinstance(spec.get("concurrency"), int):
            parts.append(f"c{spec['concurrency']}")
        return "-".join(parts)
    name = document.get("name")
    return name if isinstance(name, str) else ""


def latency_of(store: EvidenceStore, records: list[AttemptRecord]) -> list[LatencySeries]:
    """Percentile dicts (keys `p50`, `p90`, `p99`… with numbers) in acceptance/bench attempts.

    `metric` is the key the dict sits under (`ttft`, `e2e`, …), `label` names the series
    (a bench round, a file) so plots can put the same metric of several rounds side by side.
    """
    result = []
    for record in records:
        if not _is_latency_kind(record.kind):
            continue
        where = _relpath(store, record)
        seen: set[tuple] = set()
        for document in _json_documents(store, record):
            prefix = _document_label(document)
            for path, item in _walk(document):
                percentiles = {k: float(v) for k, v in item.items()
                               if _PERCENTILE.match(str(k)) and _number(v) is not None}
                if not percentiles:
                    continue
                named = [p for p in path if not p.isdigit()]
                metric = named[-1] if named else "latency"
                label = "/".join(x for x in (prefix, *named[:-1]) if x) or record.kind
                fingerprint = (label, metric, tuple(sorted(percentiles.items())))
                if fingerprint in seen:
                    continue
                seen.add(fingerprint)
                ordered = dict(sorted(percentiles.items(), key=lambda kv: float(kv[0][1:])))
                result.append(LatencySeries(
                    kind=record.kind, label=label, metric=metric, status=record.status,
                    unit=_unit_of(path, item), percentiles=ordered, evidence=where,
                    attempt_id=record.attempt_id))
    return result


def _walk_mine(value: Any, aliases: set[str], inherited: frozenset[str] = frozenset()
               ) -> Iterator[dict]:
    """Like `_walk`, but skips any dict that (itself or through its parents) names another
    image in an identity field: a record covering several images yields only this one's part."""
    if isinstance(value, dict):
        own = {d for d in (_digest_of(value.get(f)) for f in IDENTITY_FIELDS) if d}
        chain = inherited | own
        if chain and not chain & aliases:
            return
        yield value
        for item in value.values():
            yield from _walk_mine(item, aliases, chain)
    elif isinstance(value, list):
        for item in value:
            yield from _walk_mine(item, aliases, inherited)


def _pinned_digest(value: Any) -> str | None:
    """A digest, or the digest of a pinned reference (`repo@sha256:…`)."""
    if isinstance(value, str) and "@" in value:
        value = value.rpartition("@")[2]
    return _digest_of(value)


def _versions(value: Any) -> dict[str, str]:
    """{package: version} from a dict, or from a list of {name, version} entries."""
    if isinstance(value, dict):
        return {str(k): str(v) for k, v in value.items()
                if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
    if isinstance(value, list):
        return {str(e["name"]): str(e["version"]) for e in value
                if isinstance(e, dict) and isinstance(e.get("name"), str)
                and isinstance(e.get("version"), (str, int, float))}
    return {}


def facts_of(store: EvidenceStore, records: list[AttemptRecord],
             aliases: set[str] | None = None) -> ImageFacts:
    """Final versions, base digest and fix layers: the latest images-verify attempt that has
    them, else the latest build/probe attempt that does. Parts of a record that name another
    image's digest are skipped."""
    aliases = aliases or set()
    ordered = [r for r in reversed(records) if r.kind == "images-verify"] + \
              [r for r in reversed(records) if r.kind in FACT_KINDS - {"images-verify"}]
    versions: dict[str, str] = {}
    base: str | None = None
    fixes: list[str] = []
    name: str | None = None
    source: str | None = None
    for record in ordered:
        if not versions:    # imagekit.probe writes {package: version} as versions.json
            for path, document in _json_files(store, record):
                if path.rsplit("/", 1)[-1] == "versions.json":
                    versions = {k: v for k, v in _versions(document).items() if v != "None"}
                    if versions:
                        source = _relpath(store, record)
                        break
        for document in _json_documents(store, record):
            for item in _walk_mine(document, aliases):
                if not versions:
                    for key in ("versions", "final_versions"):
                        versions = _versions(item.get(key))
                        if versions:
                            source = _relpath(store, record)
                            break
                if base is None:
                    base = _digest_of(item.get("base_digest")) or \
                        _pinned_digest(item.get("base"))
                layers = item.get("fix_layers") or item.get("fixes")
                if not fixes and isinstance(layers, list) and layers:
                    fixes = [layer if isinstance(layer, str) else
                             json.dumps(layer, sort_keys=True) for layer in layers]
                if name is None:
                    candidate = item.get("image") or item.get("image_name")
                    if isinstance(candidate, str) and candidate:
                        name = candidate
        if versions and base and fixes:
            break
    name = image_and_profile(records)[0] or name
    return ImageFacts(name=name, versions=versions, base_digest=base, fix_layers=fixes,
                      source=source)


def overrides_of(store: EvidenceStore, records: list[AttemptRecord]) -> list[OverrideRecord]:
    result = []
    for record in records:
        if record.kind != "gate-override":
            continue
        reasons = record.context.get("refused_for")
        result.append(OverrideRecord(
            reason=str(record.context.get("reason", "")), user=str(record.context.get("user", "")),
            refused_for=[str(r) for r in reasons] if isinstance(reasons, list) else [],
            finished=record.finished, evidence=_relpath(store, record)))
    return result


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
                 accepted: list[Accepted] | None = None) -> ImageReport:
    """The report of one image digest. NotFound when the store has no attempt about it.

    `accepted`: statuses accepted for this image; by default those of the images spec for the
    image and profile the evidence names (`profile` overrides the evidence's)."""
    digest = Digest.parse(str(digest))
    requirements = parse_requirements(required)
    every = all_records(store)
    aliases, records = related(store, digest, every)
    if not records:
        raise NotFound(f"no evidence for {digest}", where=str(store.root))
    image, recorded_profile = image_and_profile(records)
    profile = profile or recorded_profile
    if accepted is None:
        accepted = from_spec(name or image, profile)
    current, history = current_and_history(store, records)
    current, history = apply_accepted(current, accepted), apply_accepted(history, accepted)
    outcomes = evaluate_required(current, requirements)
    # facts may also come from a record about several images that names this one inside
    # (its checks are not attributed: they may be about the others)
    ids = {id(r) for r in records}
    shared = [r for r in every if id(r) not in ids and r.kind in FACT_KINDS
              and not identities(r, store) and mentions(store, r, aliases)]
    facts = facts_of(store, sorted([*records, *shared], key=lambda r: (r.started, r.attempt_id)),
                     aliases)
    if name and not facts.name:
        facts = facts.model_copy(update={"name": name})
    return ImageReport(
        subject=str(digest), requested=requested or str(digest),
        generated=dt.datetime.now(dt.timezone.utc), evidence_root=str(store.root),
        status=overall_status(current, outcomes),
        aliases=sorted(aliases - {str(digest)}), profile=profile, accepted=accepted,
        facts=facts, checks=current, history=history,
        required=outcomes, endpoints=endpoints_of(store, records),
        preflight=preflight_of(store, records), latency=latency_of(store, records),
        overrides=overrides_of(store, records))


def evidence_file(report: ImageReport, line: EvidenceLine) -> Path:
    """The attempt.json a line came from (absolute)."""
    return Path(report.evidence_root) / line.evidence / "attempt.json"
