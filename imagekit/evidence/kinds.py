"""One result model per evidence kind (docs/design/evidence.md lists them with their subjects).

These are the facts a kind's attempt establishes, in the shape readers (the report, the gate,
in-toto) rely on; raw outputs (logs, exchanges, the operation's own full result) stay files of
the attempt beside it. Units are in the field names or an explicit `unit` field, never guessed.
Add a kind: one model here (registered), one producer calling `Attempt.write_result`, one
projection in `imagekit/report/collect.py`, one line in `imagekit/schemas/export.py`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from imagekit.evidence.contract import EvidenceResult, register
from imagekit.results import Status

_FACT = ConfigDict(extra="forbid", frozen=True, defer_build=True)


@register
class BuildResult(EvidenceResult):
    """`imagekit build`: a Dockerfile built on a pinned base, and pushed to staging.
    Subjects: the pushed digest (subject), the image ID (alias), the base (base)."""

    KIND: ClassVar[str] = "build"
    kind: Literal["build"] = "build"
    schema_version: Literal[1] = 1
    name: str
    profile: str | None = None
    engine: str | None = None
    base: str | None = Field(default=None, description="base reference pinned by digest")
    base_digest: str | None = None
    image_id: str | None = Field(default=None, description="config digest (docker image ID)")
    digest: str | None = Field(default=None, description="manifest digest staging answered")
    reference: str | None = Field(default=None, description="staging repository @digest")
    local_tag: str | None = None
    cache_key: str | None = None
    seconds: float | None = None
    cached: bool = False
    source_date_epoch: int | None = Field(default=None, description="the build's "
                                          "SOURCE_DATE_EPOCH (the only time in the image)")
    epoch_origin: str | None = Field(default=None, description="where that time came from")
    builder: str | None = Field(default=None, description="the build engine (docker version "
                                "and its package files' sha256): a rebuild to the same digest "
                                "needs the same one")
    provenance: str | None = Field(default=None, description="BuildKit's SLSA provenance "
                                   "statement, a file of this attempt (none: no provenance)")


@register
class RebuildResult(EvidenceResult):
    """`images verify --rebuild`: the image built again from the same inputs on the build
    engine's main instance and on a fresh one (nothing shared but the registry), compared.
    Subjects: the expected digest (subject) when one was given, the base (base)."""

    KIND: ClassVar[str] = "rebuild"
    kind: Literal["rebuild"] = "rebuild"
    schema_version: Literal[1] = 1
    name: str
    profile: str
    base: str
    source_date_epoch: int
    epoch_origin: str
    builder: str = Field(description="the build engine: docker version and package sha256s")
    expected: str | None = Field(default=None, description="the digest the rebuild must give "
                                 "(the verified one, or --expect-digest)")
    first: str | None = Field(default=None, description="the main instance's manifest digest")
    second: str | None = Field(default=None, description="the fresh instance's manifest digest")
    verdict: Status
    detail: str
    diff: dict[str, Any] | None = Field(default=None, description="where the two builds part "
                                        "(imagekit.build.reproduce.ReproductionDiff)")


class ServeArgsEffective(BaseModel):
    """What the engine's own parser made of a serve command (its effective configuration)."""

    model_config = _FACT

    tp: int | None = None
    context_length: int | None = None
    max_requests: int | None = None
    prefill_graph: str | None = Field(default=None, description="sglang "
                                      "cuda_graph_backend_prefill; vllm cudagraph_mode")
    prefill_graph_disabled: bool | None = None
    model: str | None = None


class ServeArgsCommand(BaseModel):
    """One serve command as the image's engine parsed it: the exact argv, its verdict, the
    engine's own warnings (a deprecated flag that still maps) or the flags it does not know."""

    model_config = _FACT

    label: str
    argv: list[str]
    status: Status
    detail: str
    warnings: list[str] = []
    effective: ServeArgsEffective | None = None
    unknown: list[str] = Field(default=[], description="flags the engine did not recognize")
    error: str | None = None


class PrefillSwitchTry(BaseModel):
    model_config = _FACT

    arg: str
    accepted: bool
    warnings: list[str] = []
    error: str | None = None
    unknown: list[str] = []
    prefill_graph: str | None = None


class ServeArgsReport(BaseModel):
    """The `serve_args` probe's outcome in one image: which engine version parsed which exact
    serve commands, and the prefill switch spelling it accepts (what launches of this image
    pass as PREFILL_SWITCH). `cluster accept` launches only an argv found here with PASS."""

    model_config = _FACT

    status: Status
    detail: str
    engine: str | None = None
    version: str | None = None
    parser: str | None = Field(default=None, description="the engine's parser that judged")
    prefill_switch: str | None = None
    prefill_tried: list[PrefillSwitchTry] = []
    commands: list[ServeArgsCommand] = []
    signer: str | None = Field(default=None, description="set when read from a statement a "
                               "trusted key signed (kind attested), not measured here")

    @classmethod
    def of(cls, check) -> ServeArgsReport:  # noqa: ANN001 - a CheckResult named serve_args
        return cls.model_validate({**check.data, "status": check.status,
                                   "detail": check.detail})

    def passed(self, argv: list[str]) -> ServeArgsCommand | None:
        """The PASS entry for exactly this argv, if the image's engine parsed it."""
        return next((c for c in self.commands if c.argv == list(argv)
                     and c.status is Status.PASS), None)


@register
class ProbeResult(EvidenceResult):
    """`imagekit probe` / the probe step of images verify: in-image checks and the versions
    fact-finder. Subject: the image probed (its image ID or digest)."""

    KIND: ClassVar[str] = "probe"
    kind: Literal["probe"] = "probe"
    schema_version: Literal[1] = 1
    image: str = Field(description="the reference or local tag the probes ran in")
    probes: list[str] = []
    versions: dict[str, str | None] = {}
    serve_args: ServeArgsReport | None = None


@register
class ImagesVerifyResult(EvidenceResult):
    """`imagekit images verify` for one image: the image manifest's facts and verdict.
    Subjects: the pushed digest (subject), the image ID (alias), the base (base)."""

    KIND: ClassVar[str] = "images-verify"
    kind: Literal["images-verify"] = "images-verify"
    schema_version: Literal[1] = 1
    image: str
    engine: str | None = None
    profile: str | None = None
    reference: str | None = None
    digest: str | None = None
    image_id: str | None = None
    base: str | None = None
    base_digest: str | None = None
    fix_layers: list[str] = []
    versions: dict[str, str | None] = {}
    verdict: Status
    accepted: list[str] = Field(default=[], description="probe names the profile accepts")
    cached: bool = False
    serve_args: ServeArgsReport | None = None


class ManifestImage(BaseModel):
    model_config = _FACT

    image: str
    digest: str | None = None
    reference: str | None = None
    verdict: Status


@register
class ImagesManifestResult(EvidenceResult):
    """The whole spec's image manifest of one `images verify` run. Subjects: none judged (each
    image has its own `images-verify` attempt); the images are listed here."""

    KIND: ClassVar[str] = "images-manifest"
    kind: Literal["images-manifest"] = "images-manifest"
    schema_version: Literal[1] = 1
    profile: str
    images: list[ManifestImage] = []
    verdict: Status


@register
class VerifyCopyEvidence(EvidenceResult):
    """`imagekit verify-mirror OFFICIAL COPY`: whether a copy holds the official's content.
    Subjects: the copy (subject), the official (compared_with). A lying copy's FAIL blocks the
    copy; the official is untouched."""

    KIND: ClassVar[str] = "verify-copy"
    kind: Literal["verify-copy"] = "verify-copy"
    schema_version: Literal[1] = 1
    official: str
    copy_ref: str
    platform: str | None = None
    verdict: Literal["identical-content", "different", "not-compared"]
    official_digest: str | None = None
    copy_digest: str | None = None
    config_digest_equal: bool | None = None
    diff_ids_equal: bool | None = None
    diff_ids_matching: int | None = None
    layers: int | None = None
    official_layers: int | None = None
    compressed_digests_equal: bool | None = None
    diffids_checked: bool = False
    diffids_verified: int | None = None
    differences: list[str] = []
    error: str | None = Field(default=None, description="why no comparison could be made")


class HopEvidence(BaseModel):
    """One promotion hop: the digest the endpoint serves, read back (or not)."""

    model_config = _FACT

    endpoint: str = Field(description="the reference pushed to")
    registry: str = Field(description="host:port of the endpoint")
    digest: str
    verified: bool
    bytes_moved: int = 0
    read_back: str = ""
    referrers: list[str] | None = Field(
        None, description="referrers (attestations, SBOM) carried and read back at this "
        "endpoint; None when the hop did not copy them (awaited) or predates them")
    image_bytes: int | None = Field(
        None, description="the size of every blob of the promoted tree: bytes_moved beside "
        "it says what the registry's faults cost (resends) and what skips and mounts saved")
    upload_shape: str | None = Field(
        None, description="how blobs were uploaded at this endpoint (chunk size or monolithic "
        "PUT) and what the registry taught during the run (a 413, a refused PATCH)")
    mount_fallbacks: list[str] = Field(
        [], description="blobs whose cross-repository mount the registry did not do "
        "(202, 401, or a 201 for a blob it then did not serve): uploaded instead")


@register
class PromoteEvidence(EvidenceResult):
    """`imagekit promote`: the hops of one promotion (partial when a hop failed).
    Subject: the promoted digest."""

    KIND: ClassVar[str] = "promote"
    kind: Literal["promote"] = "promote"
    schema_version: Literal[1] = 1
    source: str
    digest: str
    via: list[str] = []
    to: str | None = None
    hops: list[HopEvidence] = []
    error: str | None = None
    copied: str | None = Field(
        None, description="what was promoted: 'index' (every platform of an index), "
        "'platform OS/ARCH' (one manifest of an index) or 'manifest' (a single-platform image)")


class ReleaseImageLine(BaseModel):
    """One image of a release promotion: where it went and how it ended."""

    model_config = _FACT

    given: str = Field(description="the SRC as given: a spec NAME or a reference")
    source: str
    destination: str = Field(description="the last endpoint it was promoted to")
    status: Status
    digest: str | None = Field(None, description="the promoted digest (None: never resolved)")
    error: str | None = None
    evidence: str | None = Field(None, description="its own promote attempt (PASS)")
    bytes_moved: int = 0
    seconds: float = 0.0


@register
class ReleaseResult(EvidenceResult):
    """`imagekit promote SRC SRC ...`: one line per image of a release, the worst status.
    Filed under the name `promote-release`; no subject (each image is judged by its own
    `promote` attempt, never by this summary)."""

    KIND: ClassVar[str] = "promote-release"
    kind: Literal["promote-release"] = "promote-release"
    schema_version: Literal[1] = 1
    status: Status
    images: list[ReleaseImageLine] = []


@register
class ClusterProbeResult(EvidenceResult):
    """`imagekit cluster probe`: the probes in a Pod of the pinned image.
    Subject: the digest the reference resolved to."""

    KIND: ClassVar[str] = "cluster-probe"
    kind: Literal["cluster-probe"] = "cluster-probe"
    schema_version: Literal[1] = 1
    reference: str
    pinned: str | None = None
    expected: str | None = None
    namespace: str | None = None
    pod: str | None = None


class BandwidthSample(BaseModel):
    model_config = _FACT

    bytes: int
    algbw_GBps: float | None = None
    busbw_GBps: float | None = None


class NoiseVerdict(BaseModel):
    """One judged item of a repeated (timed) measurement (imagekit/stats.py): every sample, the
    statistic, its interval and the 3-way band. PASS: the whole interval inside the bound;
    FAIL: the whole interval past it; NOISE: straddling (reported as PASS, never blocks);
    DEFERRED: too few samples for an interval (`why`)."""

    model_config = _FACT

    check: str
    item: str
    band: Literal["PASS", "NOISE", "FAIL", "DEFERRED"]
    statistic: float | None = None
    low: float | None = None
    high: float | None = None
    bound: float | None = None
    better: Literal["lower", "higher"] | None = None
    samples: list[float] = []
    baseline_samples: list[float] = []
    confidence: float | None = None
    statistic_definition: str | None = None
    interval_definition: str | None = None
    why: str | None = None


@register
class GpuPreflightResult(EvidenceResult):
    """A GPU preflight: a recorded run (`imagekit gpu record`: world size, backend, all-reduce
    bandwidth per size) or a preflight Pod (`imagekit cluster preflight`: reference, pod).
    Subject: the image digest it ran (when given)."""

    KIND: ClassVar[str] = "gpu-preflight"
    kind: Literal["gpu-preflight"] = "gpu-preflight"
    schema_version: Literal[1] = 1
    world_size: int | None = None
    backend: str | None = None
    gpus: list[str] = []
    hostname: str | None = None
    sizes: list[BandwidthSample] = []
    #: the timed checks' cycles and verdicts (--repeats), one entry per judged item
    timed: list[NoiseVerdict] = []
    reference: str | None = None
    namespace: str | None = None
    pod: str | None = None
    submitted: bool | None = None


@register
class EngineStartupResult(EvidenceResult):
    """`imagekit cluster startup-budget` on an engine's startup log. Subject: the image."""

    KIND: ClassVar[str] = "engine-startup"
    kind: Literal["engine-startup"] = "engine-startup"
    schema_version: Literal[1] = 1
    engine: str
    log: str
    lines: int | None = None
    observed_seconds: float | None = Field(default=None, description="phases seen, summed")
    required_seconds: float | None = Field(default=None, description="with margin+overhead")


class StartupPhase(BaseModel):
    """One engine startup phase as it happened, read live from the engine's log:
    `engine_started` (first line), `weights_loaded`, `graphs_captured` (when the engine
    captures any), `api_ready`."""

    model_config = _FACT

    name: str
    at: str = Field(description="UTC time the line was seen (ISO 8601)")
    seconds: float = Field(description="since the engine container started")
    line: str = ""


class StartupOutcome(BaseModel):
    """How the start ended: `ready`, or a failed start told apart by its cause."""

    model_config = _FACT

    state: Literal["ready", "crashed", "oom-killed", "image-pull-error", "probe-timeout",
                   "deadline", "timeout", "not-started", "unschedulable"]
    detail: str = ""
    exit_code: int | None = None
    last_lines: list[str] = []
    seconds: float | None = Field(default=None, description="container start to outcome")


@register
class ClusterAcceptResult(EvidenceResult):
    """`imagekit cluster accept`: an engine Pod pinned by digest, its live startup phases, a
    controller Pod running the suites through a Service. The suites' and the load matrix's
    own results are filed beside it (kinds `accept-*`, `bench`) under the same digest.
    Subject: the engine image digest."""

    KIND: ClassVar[str] = "cluster-accept"
    kind: Literal["cluster-accept"] = "cluster-accept"
    schema_version: Literal[1] = 1
    reference: str
    pinned: str
    engine: str
    model: str | None = None
    namespace: str
    engine_pod: str
    controller_pod: str | None = None
    controller_image: str | None = None
    startup_budget_seconds: int
    budget_source: str
    phases: list[StartupPhase] = []
    startup: StartupOutcome | None = None
    controller: Status | None = Field(default=None, description="the controller itself, apart "
                                      "from the model's verdicts (never a request error)")
    filed: list[str] = Field(default_factory=list, description="kinds of the suite/load "
                             "attempts filed from the controller")
    seconds: float | None = None


class Latency(BaseModel):
    """Percentiles of one latency metric (`ttft`, `itl`, `e2e`…) in one series."""

    model_config = _FACT

    label: str = Field(description="the series: a bench round, a suite")
    metric: str
    unit: Literal["s", "ms", "us"]
    percentiles: dict[str, float] = Field(description="p50, p90, p99…")


@register
class AcceptResult(EvidenceResult):
    """`imagekit accept` suites (`accept-functional`, `accept-media`, …) against an engine.
    Subject: the image the engine runs."""

    KIND: ClassVar[str] = "accept-*"
    kind: str = Field(pattern=r"^accept-[a-z0-9][a-z0-9-]*$")
    schema_version: Literal[1] = 1
    suite: str
    base_url: str | None = None
    model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    latency: list[Latency] = []
    #: the semantic cases the answers were judged by, and the model they were calibrated on
    cases: str | None = None
    cases_calibrated_on: str | None = None
    #: sha256 of each file of the served model (by path in its folder), where the run could
    #: read them (the cluster controller hashes the model volume); empty: not known
    model_files: dict[str, str] = {}


@register
class BenchResult(EvidenceResult):
    """`imagekit bench`: a load matrix's rounds. Subject: the image the engine runs."""

    KIND: ClassVar[str] = "bench"
    kind: Literal["bench"] = "bench"
    schema_version: Literal[1] = 1
    matrix: str
    rounds: int = 0
    requests: int = 0
    base_url: str | None = None
    model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    latency: list[Latency] = []


class RehearsalStep(BaseModel):
    """One `imagekit …` sub-command the rehearsal ran."""

    model_config = _FACT

    name: str
    argv: list[str] = []
    exit_code: int | None = None
    seconds: float | None = None
    status: Status


@register
class RehearsalResult(EvidenceResult):
    """`imagekit rehearsal`: the local release path's steps. No image subject."""

    KIND: ClassVar[str] = "rehearsal"
    kind: Literal["rehearsal"] = "rehearsal"
    schema_version: Literal[1] = 1
    profile: str
    steps: list[RehearsalStep] = []
    #: `imagekit rehearsal --layers N` (None: off, the stand-ins as built)
    layers: int | None = None
    #: with --layers: image -> layers of its padded stand-in, counted in the pushed manifest
    standin_layers: dict[str, int] = {}


class GateDecision(BaseModel):
    """Whether a digest may be promoted, and every reason it may not."""

    model_config = _FACT

    digest: str
    allowed: bool
    reasons: list[str] = []
    warnings: list[str] = []
    required: list[str] = []
    overridden: bool = False
    override_reason: str | None = None
    override_evidence: str | None = None
    sources: list[str] = Field(default=[], description="where each fact the decision rests "
                               "on came from, when it was not measured here: `test-result "
                               "PASSED, signed by ci 3f2a91c0…, 127.0.0.1:5001/imagekit/x`")
    ignored: list[str] = Field(default=[], description="signed statements not counted: "
                               "signed by a key that is not trusted, superseded by a newer one")


@register
class ReportResult(EvidenceResult):
    """`imagekit report --record`: the archived report (files beside) and its gate decision.
    Subject: the reported digest. Never gate input."""

    KIND: ClassVar[str] = "report"
    kind: Literal["report"] = "report"
    schema_version: Literal[1] = 1
    subject: str
    requested: str = ""
    status: Status
    profile: str | None = None
    gate: GateDecision | None = Field(default=None, description="None only in reports "
                                      "archived before the decision was stored")
    formats: list[str] = []


@register
class GateOverrideResult(EvidenceResult):
    """A promotion forced past a refusing gate. Subject: the digest. Never gate input."""

    KIND: ClassVar[str] = "gate-override"
    kind: Literal["gate-override"] = "gate-override"
    schema_version: Literal[1] = 1
    reason: str
    user: str
    refused_for: list[str] = []
    required: list[str] = []
    context: dict[str, str | list[str] | None] = {}


@register
class StandinRootfsResult(EvidenceResult):
    """The shared stand-in root filesystem. No image subject."""

    KIND: ClassVar[str] = "standins-rootfs"
    kind: Literal["standins-rootfs"] = "standins-rootfs"
    schema_version: Literal[1] = 1
    image_tag: str | None = Field(default=None, description="the local rootfs image")


@register
class StandinBuildResult(EvidenceResult):
    """One stand-in base image built and pushed. Subject: its pushed digest."""

    KIND: ClassVar[str] = "standin-build"
    kind: Literal["standin-build"] = "standin-build"
    schema_version: Literal[1] = 1
    standin: str
    image: str | None = None
    image_id: str | None = None
    local_tag: str | None = None
    reference: str | None = None
    digest: str | None = None
    mirror: str | None = None
    mirror_digest: str | None = None
    cache_key: str | None = None
    built: bool = False


@register
class SbomResult(EvidenceResult):
    """The CycloneDX SBOM of one image (sbom.cdx.json beside it). Subject: that image's digest;
    keyed by the image's name so the previous build's SBOM is found for the diff."""

    KIND: ClassVar[str] = "sbom"
    kind: Literal["sbom"] = "sbom"
    schema_version: Literal[1] = 1
    image: str = Field(description="the reference the SBOM was taken from")
    digest: str = Field(description="the image digest the SBOM describes")
    components: int = Field(description="number of components (Python and Debian packages)")


@register
class GpuJobResult(EvidenceResult):
    """`imagekit cluster gpu-preflight --nodes N`: the preflight as one distributed job (an
    Indexed Job, or one Job per index where the server has none). Subject: the image digest;
    the world's own record is the `gpu-preflight` attempt beside it."""

    KIND: ClassVar[str] = "gpu-job"
    kind: Literal["gpu-job"] = "gpu-job"
    schema_version: Literal[1] = 1
    reference: str
    namespace: str
    job: str
    mode: Literal["indexed-job", "job-per-index"]
    server: str
    indexed_jobs: bool
    cluster_dns: bool
    nodes: int
    pods_per_node: int
    gpus_per_node: int
    pods: int
    world_size: int
    submitted: bool
    rendezvous: str | None = None
    pod_ips: dict[str, str] = {}
    endpoints: list[str] = []
    record_found: bool = False
    ranks_per_pod: int | None = Field(
        default=None, description="ranks in each Pod (world_size = pods x ranks_per_pod); "
                                  "None in records made before it")
    shape: str = Field(
        default="", description="why this mode: what the server answered (Indexed Jobs kept "
                                "by a dry run? cluster DNS?); it describes the job and is not "
                                "a check (empty in records made before it)")


@register
class AttestedResult(EvidenceResult):
    """A signed statement read from a registry and verified HERE with a trusted key
    (`imagekit evidence pull`, or the gate/report when the store lacks evidence of its own):
    what another machine signed, never what this one measured — no check line of the report
    and no local gate input comes from it; the gate decides from it only where the store has
    no evidence of its own, naming the signer in every reason. Subject: the digest the
    statement is about (= the digest the registry served)."""

    KIND: ClassVar[str] = "attested"
    kind: Literal["attested"] = "attested"
    schema_version: Literal[1] = 1
    registry: str = Field(description="host:port the referrer was read from")
    repository: str
    referrer: str = Field(description="digest of the referrer manifest")
    bundle: str = Field(description="digest of the Sigstore bundle blob (re-hashed)")
    fingerprint: str = Field(description="sha256:<hex> of the verifying key's SPKI DER")
    signer: str = Field(description="the trust policy's name for that key when imported")
    predicate_type: str
    signed_at: str | None = Field(default=None, description="the time inside the signed "
                                  "statement (UTC ISO 8601); freshness is decided by it")
    statement: dict = Field(description="the in-toto statement itself, as signed")
