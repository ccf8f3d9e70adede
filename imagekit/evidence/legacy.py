"""Reader of the previous evidence layout (attempt.json without `layout`, `subjects`, `result`).

Earlier, each producer kept its facts in files of its own naming and shape, and readers
guessed keys. That guessing lives on only here, for attempts already on disk, and turns each one
into today's contract: its subjects (from the key, identity fields of its context and, for a
build, of build.json; verify-copy's copy is the subject and the official only compared with)
and its result model. New attempts never come through here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from imagekit.evidence.contract import EvidenceResult, Role, Subject
from imagekit.evidence.kinds import (
    AcceptResult,
    BandwidthSample,
    BenchResult,
    BuildResult,
    ClusterProbeResult,
    EngineStartupResult,
    GateOverrideResult,
    GpuPreflightResult,
    HopEvidence,
    ImagesManifestResult,
    ImagesVerifyResult,
    Latency,
    ManifestImage,
    ProbeResult,
    PromoteEvidence,
    RehearsalResult,
    RehearsalStep,
    ReportResult,
    StandinBuildResult,
    StandinRootfsResult,
    VerifyCopyEvidence,
)
from imagekit.oci.digest import Digest
from imagekit.results import Status

if TYPE_CHECKING:  # the store calls in; no import cycle at run time
    from imagekit.evidence.store import AttemptRecord, EvidenceStore

#: Context/data keys whose digest value *was* the image (not its base, not a layer).
IDENTITY_FIELDS = ("digest", "image_digest", "image_id", "config_digest", "manifest_digest",
                   "registry_digest", "local_digest", "pushed_digest", "staging_digest")
_MAX_JSON_BYTES = 2 * 1024 * 1024
_PERCENTILE = re.compile(r"^p(\d{1,2}(?:\.\d+)?|100)$")


def _digest(value: Any) -> str | None:
    if isinstance(value, str) and "@" in value:
        value = value.rpartition("@")[2]
    if isinstance(value, str) and value.startswith(("sha256:", "sha512:")):
        try:
            return str(Digest.parse(value))
        except Exception:  # noqa: BLE001 - a malformed value is just not a digest
            return None
    return None


def _json(store: EvidenceStore, record: AttemptRecord, name: str) -> Any:
    for entry in record.files:
        if entry.path == name and entry.size <= _MAX_JSON_BYTES:
            try:
                return json.loads((store.path_of(record) / name).read_text())
            except (OSError, ValueError):
                return None
    return None


def _json_files(store: EvidenceStore, record: AttemptRecord) -> Iterator[tuple[str, Any]]:
    base = store.path_of(record)
    for entry in record.files:
        if not entry.path.endswith(".json") or entry.size > _MAX_JSON_BYTES:
            continue
        try:
            yield entry.path, json.loads((base / entry.path).read_text())
        except (OSError, ValueError):
            continue


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


# -- subjects --------------------------------------------------------------------------------

def subjects(store: EvidenceStore, record: AttemptRecord) -> list[Subject]:
    key = _digest(record.key)
    context = record.context
    if record.kind == "verify-copy":
        # the old layout filed the comparison under the OFFICIAL digest; it is about the copy
        found = []
        copy = _digest(context.get("copy_digest")) or _digest(context.get("copy"))
        if copy:
            found.append(Subject.of(copy, Role.SUBJECT, _str(context.get("copy"))))
        official = key or _digest(context.get("official"))
        if official:
            found.append(Subject.of(official, Role.COMPARED_WITH, _str(context.get("official"))))
        return found
    found = [Subject.of(key)] if key else []
    documents: list[Any] = [context]
    if record.kind == "build":
        documents += [doc for _, doc in _json_files(store, record)]
    seen = {key} if key else set()
    for document in documents:
        if not isinstance(document, dict):
            continue
        for field in IDENTITY_FIELDS:
            value = document.get(field)
            digest = _digest(value) if isinstance(value, str) and "@" not in value else None
            if digest and digest not in seen:
                seen.add(digest)
                found.append(Subject.of(digest, Role.SUBJECT if not found else Role.ALIAS))
    base = _digest(context.get("base_digest")) or _digest(context.get("base"))
    if base and base not in seen:
        found.append(Subject.of(base, Role.BASE))
    return found


# -- results ---------------------------------------------------------------------------------

def result(store: EvidenceStore, record: AttemptRecord) -> EvidenceResult | None:
    reader = _READERS.get(record.kind)
    if reader is None and record.kind.startswith("accept-"):
        reader = _accept
    return reader(store, record) if reader is not None else None


def _build(store, record) -> BuildResult:
    doc = _json(store, record, "build.json")
    doc = doc if isinstance(doc, dict) else {}
    ctx = record.context
    base = _str(doc.get("base")) or _str(ctx.get("base"))
    name = _str(doc.get("name")) or _str(ctx.get("name")) or _str(ctx.get("image")) or \
        record.key.removeprefix("name:").removeprefix("image-")
    return BuildResult(
        name=name, profile=_str(doc.get("profile")) or _str(ctx.get("profile")),
        engine=_str(doc.get("engine")), base=base,
        base_digest=_digest(base) or _digest(ctx.get("base_digest")),
        image_id=_digest(doc.get("image_id")) or _digest(ctx.get("image_id")),
        digest=_digest(doc.get("digest")) or _digest(ctx.get("registry_digest")),
        reference=_str(doc.get("reference")), local_tag=_str(doc.get("local_tag")),
        cache_key=_str(doc.get("cache_key")) or _str(ctx.get("cache_key")),
        seconds=doc.get("seconds") if isinstance(doc.get("seconds"), (int, float)) else None,
        cached=doc.get("cached") is True)


def _versions(value: Any) -> dict[str, str | None]:
    if isinstance(value, dict):
        return {str(k): (None if v is None else str(v)) for k, v in value.items()
                if v is None or isinstance(v, (str, int, float)) and not isinstance(v, bool)}
    if isinstance(value, list):
        return {str(e["name"]): str(e["version"]) for e in value
                if isinstance(e, dict) and isinstance(e.get("name"), str)
                and isinstance(e.get("version"), (str, int, float))}
    return {}


def _probe(store, record) -> ProbeResult:
    ctx = record.context
    probes = ctx.get("probes")
    return ProbeResult(image=_str(ctx.get("image")) or record.key,
                       probes=[str(p) for p in probes] if isinstance(probes, list) else [],
                       versions=_versions(_json(store, record, "versions.json")))


def _images_verify(store, record) -> ImagesVerifyResult:
    doc = _json(store, record, "entry.json")
    if not isinstance(doc, dict):
        doc = _json(store, record, "manifest.json")
    doc = doc if isinstance(doc, dict) else {}
    ctx = record.context
    accepted = doc.get("accepted")
    layers = doc.get("fix_layers") or doc.get("fixes") or []
    verdict = doc.get("verdict")
    return ImagesVerifyResult(
        image=_str(doc.get("image")) or _str(ctx.get("image")) or record.key,
        engine=_str(doc.get("engine")), profile=_str(doc.get("profile")),
        reference=_str(doc.get("reference")),
        digest=_digest(doc.get("digest")) or _digest(ctx.get("digest")),
        image_id=_digest(doc.get("image_id")) or _digest(ctx.get("image_id")),
        base=_str(doc.get("base")), base_digest=_digest(doc.get("base_digest")),
        fix_layers=[x if isinstance(x, str) else json.dumps(x, sort_keys=True)
                    for x in layers] if isinstance(layers, list) else [],
        versions=_versions(doc.get("versions") or doc.get("final_versions")),
        verdict=(Status(verdict) if isinstance(verdict, str) and verdict in Status.__members__
                 else record.status),
        accepted=[str(a.get("check", a.get("name", ""))) if isinstance(a, dict) else str(a)
                  for a in accepted] if isinstance(accepted, list) else [],
        cached=ctx.get("cached") is True)


def _images_manifest(store, record) -> ImagesManifestResult:
    doc = _json(store, record, "manifest.json")
    doc = doc if isinstance(doc, dict) else {}
    images = [ManifestImage(image=str(e.get("image", "")), digest=_digest(e.get("digest")),
                            reference=_str(e.get("reference")),
                            verdict=Status(e["verdict"]) if e.get("verdict") in
                            Status.__members__ else Status.ERROR)
              for e in doc.get("images", []) if isinstance(e, dict)]
    return ImagesManifestResult(profile=str(doc.get("profile") or record.key),
                                images=images, verdict=record.status)


def _verify_copy(store, record) -> VerifyCopyEvidence:
    doc = _json(store, record, "result.json")
    ctx = record.context
    if not isinstance(doc, dict):
        return VerifyCopyEvidence(official=str(ctx.get("official", "")),
                                  copy_ref=str(ctx.get("copy", "")), verdict="not-compared",
                                  error=record.summary or None)
    fields = set(VerifyCopyEvidence.model_fields) - {"kind", "schema_version", "error"}
    return VerifyCopyEvidence(**{k: doc[k] for k in fields if k in doc})


def _promote(store, record) -> PromoteEvidence:
    doc = _json(store, record, "result.json")
    ctx = record.context
    if isinstance(doc, dict):
        hops, source, digest, error = doc.get("hops", []), doc.get("source"), \
            doc.get("digest"), None
    else:
        partial = _json(store, record, "hops.json")
        hops = partial if isinstance(partial, list) else []
        source, digest, error = ctx.get("source"), record.key, record.summary or None
    fields = set(HopEvidence.model_fields)
    via = ctx.get("via")
    return PromoteEvidence(
        source=str(source or ""), digest=str(digest), to=_str(ctx.get("to")),
        via=[str(v) for v in via] if isinstance(via, list) else [],
        hops=[HopEvidence(**{k: h[k] for k in fields if k in h}) for h in hops
              if isinstance(h, dict)], error=error)


def _cluster_probe(store, record) -> ClusterProbeResult:
    ctx = record.context
    return ClusterProbeResult(reference=str(ctx.get("reference", "")),
                              pinned=_str(ctx.get("pinned")), expected=_str(ctx.get("expected")),
                              namespace=_str(ctx.get("namespace")), pod=_str(ctx.get("pod")))


def _gpu_preflight(store, record) -> GpuPreflightResult:
    ctx = record.context
    doc = _json(store, record, "preflight.json")
    sizes: list[BandwidthSample] = []
    world = _int(ctx.get("world_size"))
    backend = _str(ctx.get("backend"))
    if isinstance(doc, dict):
        bandwidth = doc.get("bandwidth")
        table: dict = bandwidth if isinstance(bandwidth, dict) else doc
        for size in table.get("sizes", []) if isinstance(table.get("sizes"), list) else []:
            if isinstance(size, dict) and _int(size.get("bytes")) is not None:
                sizes.append(BandwidthSample(
                    bytes=size["bytes"],
                    algbw_GBps=_float(size.get("algbw_GBps", size.get("algbw"))),
                    busbw_GBps=_float(size.get("busbw_GBps", size.get("busbw")))))
        world = world or _int(doc.get("world_size")) or _int(table.get("n"))
        backend = backend or _str(doc.get("backend")) or _str(table.get("backend"))
    gpus = ctx.get("gpus")
    submit = ctx.get("submit")
    return GpuPreflightResult(
        world_size=world, backend=backend,
        gpus=[str(g) for g in gpus] if isinstance(gpus, list) else [],
        hostname=_str(ctx.get("hostname")), sizes=sorted(sizes, key=lambda s: s.bytes),
        reference=_str(ctx.get("reference")), namespace=_str(ctx.get("namespace")),
        pod=_str(ctx.get("pod")), submitted=submit if isinstance(submit, bool) else None)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _engine_startup(store, record) -> EngineStartupResult:
    ctx = record.context
    doc = _json(store, record, "startup.json")
    doc = doc if isinstance(doc, dict) else {}
    return EngineStartupResult(engine=str(ctx.get("engine", "")), log=str(ctx.get("log", "")),
                               lines=_int(doc.get("lines")))


# the old reader's unit rule: a `unit` key, else a key suffix, else LatencyStats (seconds)
def _unit(path: tuple[str, ...], item: dict) -> str:
    unit = item.get("unit")
    if unit in ("s", "ms", "us"):
        return unit
    text = "_".join(path).lower()
    for suffix, name in (("_ms", "ms"), ("_us", "us"), ("_seconds", "s"), ("_s", "s")):
        if text.endswith(suffix) or f"{suffix}_" in text:
            return name
    return "s"


def _walk(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict]]:
    if isinstance(value, dict):
        yield path, value
        for key, item in value.items():
            yield from _walk(item, (*path, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, str(index)))


def _label(document: Any) -> str:
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


def _latency(store, record) -> list[Latency]:
    found: list[Latency] = []
    seen: set[tuple] = set()
    documents = [record.context, *(c.data for c in record.checks if c.data),
                 *(doc for _, doc in _json_files(store, record))]
    for document in documents:
        prefix = _label(document)
        for path, item in _walk(document):
            percentiles = {k: float(v) for k, v in item.items()
                           if _PERCENTILE.match(str(k)) and _float(v) is not None}
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
            found.append(Latency(label=label, metric=metric, unit=_unit(path, item),
                                 percentiles=ordered))
    return found


def _accept(store, record) -> AcceptResult:
    ctx = record.context
    return AcceptResult(kind=record.kind, suite=str(ctx.get("suite") or
                                                   record.kind.removeprefix("accept-")),
                        base_url=_str(ctx.get("base_url")), model=_str(ctx.get("model")),
                        engine=_str(ctx.get("engine")),
                        engine_version=_str(ctx.get("engine_version")),
                        latency=_latency(store, record))


def _bench(store, record) -> BenchResult:
    ctx = record.context
    return BenchResult(matrix=str(ctx.get("matrix", "")), rounds=_int(ctx.get("rounds")) or 0,
                       requests=_int(ctx.get("requests")) or 0,
                       base_url=_str(ctx.get("base_url")), model=_str(ctx.get("model")),
                       engine=_str(ctx.get("engine")),
                       engine_version=_str(ctx.get("engine_version")),
                       latency=_latency(store, record))


def _rehearsal(store, record) -> RehearsalResult:
    steps = _json(store, record, "steps.json")
    return RehearsalResult(
        profile=str(record.context.get("profile", "")),
        steps=[RehearsalStep(name=str(s.get("name", "")),
                             argv=[str(a) for a in s.get("argv", [])],
                             exit_code=_int(s.get("exit_code")),
                             seconds=_float(s.get("seconds")),
                             status=Status(s["status"]) if s.get("status") in
                             Status.__members__ else Status.ERROR)
               for s in steps if isinstance(s, dict)] if isinstance(steps, list) else [])


def _report(store, record) -> ReportResult:
    ctx = record.context
    status = ctx.get("status")
    return ReportResult(subject=record.key, requested=str(ctx.get("requested", "")),
                        status=Status(status) if status in Status.__members__ else
                        record.status, profile=_str(ctx.get("profile")), gate=None,
                        formats=sorted(e.path.rsplit(".", 1)[0].removeprefix("report.")
                                       for e in record.files if e.path.startswith("report.")))


def _gate_override(store, record) -> GateOverrideResult:
    ctx = record.context
    refused = ctx.get("refused_for")
    required = ctx.get("required")
    rest = {k: (v if isinstance(v, (str, type(None))) else
                [str(x) for x in v] if isinstance(v, list) else str(v))
            for k, v in ctx.items() if k not in ("reason", "user", "refused_for", "required")}
    return GateOverrideResult(
        reason=str(ctx.get("reason", "")), user=str(ctx.get("user", "")),
        refused_for=[str(r) for r in refused] if isinstance(refused, list) else [],
        required=[str(r) for r in required] if isinstance(required, list) else [],
        context=rest)


def _standins_rootfs(store, record) -> StandinRootfsResult:
    return StandinRootfsResult()


def _standin_build(store, record) -> StandinBuildResult:
    doc = _json(store, record, "standin.json")
    doc = doc if isinstance(doc, dict) else {}
    return StandinBuildResult(
        standin=str(doc.get("standin") or record.key.removeprefix("name:standin-")),
        image=_str(doc.get("image")), image_id=_digest(doc.get("image_id")),
        reference=_str(doc.get("reference")), digest=_digest(doc.get("digest")),
        mirror=_str(doc.get("mirror")), mirror_digest=_digest(doc.get("mirror_digest")),
        local_tag=_str(doc.get("local_tag")) or _str(record.context.get("local_tag")),
        cache_key=_str(record.context.get("cache_key")), built=doc.get("built") is True)


_READERS = {
    "build": _build, "probe": _probe, "images-verify": _images_verify,
    "images-manifest": _images_manifest, "verify-copy": _verify_copy, "promote": _promote,
    "cluster-probe": _cluster_probe, "gpu-preflight": _gpu_preflight,
    "engine-startup": _engine_startup, "bench": _bench, "rehearsal": _rehearsal,
    "report": _report, "gate-override": _gate_override, "standins-rootfs": _standins_rootfs,
    "standin-build": _standin_build,
}
