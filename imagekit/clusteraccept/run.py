"""`imagekit cluster accept`: acceptance of an image on the cluster, by tag, end to end.

The record's sections 6-11 in one flow (docs/design/cluster.md, "cluster accept"):

1. the tag is resolved at the registry and the digest pinned (by the caller); the image's
   image-phase evidence must pass the gate (injected by the caller, as for promote);
2. the startupProbe budget: an explicit one, else the last observed start of this engine and
   model (`engine-startup` evidence) with a margin, else a default. An explicit budget shorter
   than what was observed is a FAIL reported BEFORE anything is submitted; a budget no start
   measured is DEFERRED until this run's own ready start judges it (PASS or FAIL), and stays
   DEFERRED when the engine never became ready;
3. the exact engine Pod spec is prechecked (node, taints, storage capability of the model
   claim, priority admission, GPUs when it asks for any); a finding stops here;
4. the launch ConfigMap, the engine Pod pinned by digest, a Service, and at once the
   controller Pod (its scripts from a ConfigMap at /opt/controller, a directory mount: an
   update reaches the Pod; section 9), which waits for the engine through the Service;
5. the engine's log is followed live and every startup phase stamped as it appears; a failed
   start (crash, OOMKilled, pull error, probe timeout) is told apart from a ready server and
   keeps the engine's last lines;
6. the controller runs imagekit's acceptance suites and the load matrix in the Pod; their
   attempts are filed under the engine digest (kinds `accept-*`, `bench`); a controller
   failure is recorded apart (the `controller` check), never as a model failure or a request
   error;
7. everything it created is deleted, and it waits until it is gone.

Evidence: one `cluster-accept` attempt (Pod specs, both logs, phases, the outcome) and an
`engine-startup` attempt per ready start (the next run's budget), both under the digest.
"""

from __future__ import annotations

import datetime as dt
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from imagekit.acceptance.cases import load as load_cases
from imagekit.cluster import admit, manifests, podsecurity
from imagekit.cluster.podrun import PodRun
from imagekit.cluster.pods import observed
from imagekit.cluster.precheck import PodIntent, precheck
from imagekit.clusteraccept.phases import (
    PhaseTracker,
    container_started,
    engine_error_line,
    failed_start,
    pod_ready,
)
from imagekit.clusteraccept.protocol import AttemptLine, ProtocolError, ResultLine, parse_log
from imagekit.errors import TransportError
from imagekit.evidence import EvidenceStore, Role, Subject
from imagekit.evidence.contract import model_for
from imagekit.evidence.kinds import (
    AttestedResult,
    ClusterAcceptResult,
    EngineStartupResult,
    ServeArgsReport,
    StartupOutcome,
    StartupPhase,
)
from imagekit.evidence.store import Attempt, AttemptRecord
from imagekit.kube import Kube
from imagekit.kube.watch import observe
from imagekit.launch.budget import DEFAULT_MARGIN, DEFAULT_OVERHEAD_S, ProbeBudget
from imagekit.launch.command import Engine, ServeConfig
from imagekit.launch.pod import engine_pod
from imagekit.oci import Digest, ImageReference
from imagekit.results import CheckReport, CheckResult, Status

KIND = "cluster-accept"
DEFAULT_STARTUP_S = 900
#: on a CPU node: vLLM's CPU platform, chosen explicitly (the record, section 4: on a GPU-less
#: node the real image infers no device); small KV cache; no thread pinning on shared cores
CPU_ENGINE_ENV = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
                  "VLLM_CPU_OMP_THREADS_BIND": "nobind", "HF_HUB_OFFLINE": "1"}
CPU_ENGINE_ARGS = ("--dtype", "float32", "--enforce-eager")


#: where the controller Pod sees the model volume (read-only; its files are hashed)
CONTROLLER_MODEL_MOUNT = "/models/model"


class AcceptOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    namespace: str
    engine: Engine = Engine.VLLM
    model_claim: str | None = None
    model_path: str = "/models/model"
    served_model_name: str | None = None
    tp: int = 1
    gpus: int = 0
    max_context: int = 32768
    max_requests: int = 8
    disable_piecewise_cuda_graph: bool = False
    engine_env: dict[str, str] = Field(default_factory=dict)
    engine_args: list[str] = Field(default_factory=list)
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[dict] = Field(default_factory=list)
    priority_class_name: str | None = None
    startup_seconds: int | None = None
    suites: list[str] = Field(default_factory=lambda: ["functional"])
    require: list[str] = Field(default_factory=list)
    matrix_text: str | None = None
    engine_config_text: str | None = None
    #: the cases file's text (imagekit.acceptance.cases): it travels in the scripts ConfigMap
    cases_text: str | None = None
    #: room for the shipped cases' answers (a random-weight stand-in is capped lower by the
    #: runner: its answers are not judged)
    max_tokens: int = 96
    docker_config_dir: Path | None = None
    timeout_s: float = 3600
    keep: bool = False
    #: launch although the image never parsed this command (serve_args), and why
    force_launch: str | None = Field(None, min_length=3)


class Hooks:
    """What the caller sees while it runs, through the command's progress (imagekit.progress:
    rich on a terminal, one line per stage on a pipe, JSON lines with --json): each stage of
    the flow and each engine startup phase, as it happens. Tests also use
    `controller_waiting` to switch the ConfigMap under the waiting controller."""

    def __init__(self) -> None:
        from imagekit import progress

        self.stages = progress.current().stages("cluster accept")
        self._lock = threading.Lock()

    def stage(self, name: str, detail: str | None = None) -> None:
        with self._lock:
            self.stages.enter(name, detail)

    def step(self, text: str) -> None:
        with self._lock:
            self.stages.detail(text[:200])

    def phase(self, phase: StartupPhase) -> None:
        name = phase.name.replace("_", " ")
        self.stage(name if name.startswith("engine") else f"engine {name}",
                   f"at {phase.seconds:.1f} s: {phase.line[:120]}")

    def log_line(self, line: str) -> None:
        self.step(line.strip())

    def end(self, failed: str | None = None) -> None:
        with self._lock:
            self.stages.end(failed)

    def controller_waiting(self, kube: Kube, namespace: str, configmap: str) -> None:
        return None


def last_observed_startup(store: EvidenceStore, engine: str, model: str | None
                          ) -> tuple[float, str] | None:
    """(observed seconds, attempt path) of the newest `engine-startup` evidence of this engine
    and model (launch-log evidence: `launch-log parse` or a ready `cluster accept`)."""
    best: tuple[str, float, str] | None = None
    for entry in store.index():
        if entry.get("kind") != "engine-startup":
            continue
        path = store.root / entry["path"] if "path" in entry else None
        if path is None or not (path / "attempt.json").is_file():
            continue
        record = AttemptRecord.model_validate_json((path / "attempt.json").read_text())
        result = store.result(record)
        if not isinstance(result, EngineStartupResult) or result.engine != engine:
            continue
        if model is not None and record.context.get("model") not in (None, model):
            continue
        if result.observed_seconds is None:
            continue
        stamp = record.finished.isoformat()
        if best is None or stamp > best[0]:
            best = (stamp, result.observed_seconds, str(path))
    return (best[1], best[2]) if best else None


def required_for(observed: float) -> int:
    return math.ceil(observed * (1 + DEFAULT_MARGIN) + DEFAULT_OVERHEAD_S)


def startup_budget(store: EvidenceStore, options: AcceptOptions, model: str | None
                   ) -> tuple[int, str, CheckResult]:
    """(budget seconds, where it came from, the budget check). FAIL: an explicit budget below
    what the last observed start of this engine and model needs."""
    seen = last_observed_startup(store, options.engine.value, model)
    if options.startup_seconds is not None:
        budget = options.startup_seconds
        if seen is not None:
            observed, evidence = seen
            need = required_for(observed)
            short = budget < need
            return budget, "explicit", CheckResult(
                name="startup_budget", status=Status.FAIL if short else Status.PASS,
                data={"configured_seconds": budget, "observed_seconds": observed,
                      "required_seconds": need, "evidence": evidence},
                detail=(f"startupProbe budget {budget} s is shorter than the last observed "
                        f"start of {options.engine.value} {model or ''}: {observed:.1f} s to "
                        f"API ready needs {need} s with margin ({evidence}); not submitted")
                if short else
                (f"startupProbe budget {budget} s (given) covers the last observed start: "
                 f"{observed:.1f} s to API ready needs {need} s with margin"))
        return budget, "explicit", CheckResult(
            name="startup_budget", status=Status.DEFERRED,
            data={"configured_seconds": budget},
            detail=f"startupProbe budget {budget} s (given); no observed start of "
                   f"{options.engine.value} {model or ''} in evidence to check it against "
                   "(this run's own start judges it once the engine is ready)")
    if seen is not None:
        budget = required_for(seen[0])
        return budget, f"observed {seen[0]:.1f} s ({seen[1]})", CheckResult(
            name="startup_budget", status=Status.PASS,
            data={"configured_seconds": budget, "observed_seconds": seen[0]},
            detail=f"startupProbe budget {budget} s from the last observed start "
                   f"({seen[0]:.1f} s to API ready, margin {DEFAULT_MARGIN:.0%} + "
                   f"{DEFAULT_OVERHEAD_S:.0f} s)")
    return DEFAULT_STARTUP_S, "default", CheckResult(
        name="startup_budget", status=Status.DEFERRED,
        data={"configured_seconds": DEFAULT_STARTUP_S},
        detail=f"no observed start of {options.engine.value} {model or ''} in evidence: "
               f"default budget {DEFAULT_STARTUP_S} s, measured against nothing (this run's "
               "own start judges it once the engine is ready)")


def budget_after_start(check: CheckResult, budget: int, observed: float | None,
                       unmeasured: str = "the engine never became ready here") -> CheckResult:
    """The startup budget judged by this run's own start, when nothing judged it before (a
    DEFERRED budget): PASS when `budget` covers the observed start with the margin, FAIL
    when it does not (the engine came up, but closer to the probe's limit than the margin
    allows; the next run's budget comes from this start). No measured start: the DEFERRED
    stays, `unmeasured` saying why. A budget already judged from evidence is returned as it
    was."""
    if check.status is not Status.DEFERRED:
        return check
    if observed is None:
        return check.model_copy(update={
            "detail": check.detail.replace(" (this run's own start judges it once the engine "
                                           "is ready)", "")
            + f"; {unmeasured}, so no start measured it either"})
    need = required_for(observed)
    data = {**check.data, "observed_seconds": round(observed, 3), "required_seconds": need,
            "observed_by": "this run"}
    if budget < need:
        return CheckResult(
            name=check.name, status=Status.FAIL, data=data,
            detail=f"startupProbe budget {budget} s is shorter than this run's own start "
                   f"needs: {observed:.1f} s to API ready needs {need} s with margin "
                   f"{DEFAULT_MARGIN:.0%} + {DEFAULT_OVERHEAD_S:.0f} s")
    return CheckResult(
        name=check.name, status=Status.PASS, data=data,
        detail=f"startupProbe budget {budget} s covers this run's own start: {observed:.1f} s "
               f"to API ready needs {need} s with margin {DEFAULT_MARGIN:.0%} + "
               f"{DEFAULT_OVERHEAD_S:.0f} s (nothing observed before it)")


def serve_config(options: AcceptOptions, prefill_switch: str | None = None) -> ServeConfig:
    """The engine's serve settings of this run (what launch.sh in the Pod turns into argv)."""
    return ServeConfig.build(engine=options.engine, model_path=options.model_path,
                             tp=options.tp, max_context=options.max_context,
                             max_requests=options.max_requests,
                             disable_piecewise_cuda_graph=options.disable_piecewise_cuda_graph,
                             served_model_name=options.served_model_name,
                             prefill_switch=prefill_switch,
                             extra_args=tuple(options.engine_args))


def serve_args_records(store: EvidenceStore, digest: Digest
                       ) -> list[tuple[ServeArgsReport, str]]:
    """Every serve_args outcome of this image, newest first, each with where it came from:
    measured here (images verify or `imagekit probe`, filed under the digest), or signed by a
    trusted key in a test-result statement this store imported (kind `attested`: only verified,
    trusted bundles are filed; such a report names its `signer`)."""
    from pydantic import ValidationError

    found: list[tuple[tuple, ServeArgsReport, str]] = []
    for kind in ("images-verify", "probe"):
        for record in store.attempts(digest, kind):
            report = getattr(store.result(record), "serve_args", None)
            if report is not None:
                found.append(((record.started, record.attempt_id), report,
                              str(store.path_of(record))))
    for record in store.attempts(digest, "attested"):
        attested = store.result(record)
        if not isinstance(attested, AttestedResult):
            continue
        predicate = attested.statement.get("predicate")
        items = predicate.get("serveArgs") if isinstance(predicate, dict) else None
        for item in items if isinstance(items, list) else []:
            try:
                report = ServeArgsReport.model_validate(item)
            except ValidationError:
                continue
            signer = f"{attested.signer} {attested.fingerprint.removeprefix('sha256:')[:8]}…"
            found.append(((record.started, record.attempt_id),
                          report.model_copy(update={"signer": signer}),
                          f"{store.path_of(record)} (signed by {signer}, "
                          f"{attested.registry}/{attested.repository})"))
    return [(report, where) for _, report, where in sorted(found, key=lambda f: f[0],
                                                           reverse=True)]


def launch_parsed(store: EvidenceStore, digest: Digest, options: AcceptOptions
                  ) -> tuple[CheckResult, str | None]:
    """(the `launch_parsed` check, the prefill switch spelling to launch with). PASS only when
    the image's own engine parser (serve_args, under this digest: the image is immutable, so
    any of its records counts) parsed exactly the argv this run launches, with the spelling it
    chose; FAIL otherwise (nothing is submitted), unless `force_launch` gives a reason: then
    DEFERRED with it, and the launch goes ahead."""
    from imagekit.launch.command import serve_argv

    records = serve_args_records(store, digest)
    for report, where in records:
        switch = report.prefill_switch
        argv = serve_argv(serve_config(options, switch))
        hit = report.passed(argv)
        if hit is not None:
            return CheckResult(
                name="launch_parsed", status=Status.PASS,
                data={"argv": argv, "evidence": where, "prefill_switch": switch},
                detail=f"the launch command was parsed by this image's own {report.engine} "
                       f"{report.version} parser ({hit.label}: {hit.detail})"[:600]), switch
    newest: ServeArgsReport | None = records[0][0] if records else None
    newest_where: str | None = records[0][1] if records else None
    switch = newest.prefill_switch if newest is not None else None
    argv = serve_argv(serve_config(options, switch))
    data = {"argv": argv, "evidence": newest_where, "prefill_switch": switch}
    if newest is None:
        why = f"no serve_args evidence for {digest}: this image never parsed a serve command"
    else:
        parsed = sorted({f"{c.label} {c.status.value}" for r, _ in records for c in r.commands})
        why = (f"this image's {newest.engine} {newest.version} parser never passed this exact "
               f"command ({len(records)} serve_args record(s); parsed: "
               f"{', '.join(parsed) or 'nothing'})")
    shown = " ".join(argv)
    if options.force_launch:
        return CheckResult(
            name="launch_parsed", status=Status.DEFERRED,
            data={**data, "forced": options.force_launch},
            detail=f"{why}; launched anyway, forced: {options.force_launch} ({shown})"[:800]
        ), switch
    return CheckResult(
        name="launch_parsed", status=Status.FAIL, data=data,
        detail=f"{why}; not submitted. Add it to the image's serve settings "
               f"(dockerfiles/images.toml) and run `imagekit images verify`, or pass "
               f"--force-launch REASON ({shown})"[:800]), switch


#: the longest the parse Pod may take, its image pull included (the parser itself: seconds)
PARSE_TIMEOUT_S = 600


def parse_launch_now(kube: Kube, pinned: ImageReference, options: AcceptOptions, *, run: str,
                     probes_dir: Path, switch: str | None = None,
                     manifests_dir: Path | None = None, enforce: str | None = None,
                     attempt: Attempt | None = None) -> tuple[CheckResult, str | None]:
    """(the `launch_parsed` check, the prefill switch to launch with) for a launch command no
    record shows parsed: the image's own engine parser judges it now, the serve_args probe in a
    zero-GPU Pod of the pinned image (the parse `images verify` and `cluster probe` run). A
    new --max-context or model name needs no edit of the spec and no new image phase.

    PASS ("parsed now"): the launch goes ahead with the spelling of the prefill switch the
    parser chose. FAIL: the parser's own message; nothing is launched. DEFERRED: the parser
    could not judge (the Pod did not run, the parser cannot be imported); nothing is launched
    either. With `force_launch` a FAIL or DEFERRED is DEFERRED with the reason, and the launch
    goes ahead. The Pod's log and manifest go into `attempt` (`launch-parse/`)."""
    from imagekit.cluster.probe import probes_in_pod
    from imagekit.launch.command import ServeCommand, serve_argv, serve_probe_input

    command = ServeCommand.of("launch", serve_config(options, switch))
    # the runner splits its plan at spaces: inside the JSON a space is the escape \u0020
    payload = serve_probe_input(options.engine, [command]).replace(" ", "\\u0020")
    plan = [("serve_args", [options.engine.value, payload])]
    ran = probes_in_pod(kube, pinned, plan, name=f"{run}-parse", namespace=options.namespace,
                        probes_dir=probes_dir, node_selector=options.node_selector,
                        tolerations=options.tolerations, manifests_dir=manifests_dir,
                        docker_config_dir=options.docker_config_dir, enforce=enforce,
                        timeout_s=min(PARSE_TIMEOUT_S, options.timeout_s))
    evidence = None
    if attempt is not None:
        attempt.write_text("launch-parse/pod.log", ran.log)
        attempt.write_json("launch-parse/pod.json", ran.manifest)
        evidence = str(attempt.path / "launch-parse")
    verdict = next((c for c in ran.checks if c.name == "probe:serve_args"), None)
    result = verdict.data.get("result") if verdict is not None else None
    report: ServeArgsReport | None = None
    if verdict is not None and isinstance(result, dict) and verdict.status in (
            Status.PASS, Status.FAIL):
        report = ServeArgsReport.model_validate({**(result.get("data") or {}),
                                                 "status": verdict.status,
                                                 "detail": verdict.detail})
    switch = report.prefill_switch if report is not None and report.prefill_switch else switch
    argv = serve_argv(serve_config(options, switch))
    shown = " ".join(argv)
    data: dict = {"argv": argv, "evidence": evidence, "prefill_switch": switch,
                  "parsed_now": {"pod": ran.pod, "serve_args": report.model_dump(mode="json")
                                 if report is not None else None}}
    hit = report.passed(argv) if report is not None else None
    if report is not None and hit is not None:
        return CheckResult(
            name="launch_parsed", status=Status.PASS, data=data,
            detail=f"parsed now by this image's own {report.engine} {report.version} parser "
                   f"in a Pod ({hit.detail})"[:600]), switch
    if report is not None:
        said = "; ".join(c.detail for c in report.commands if c.status is not Status.PASS)
        status, why = Status.FAIL, (f"this image's own {report.engine} {report.version} "
                                    f"parser rejected the launch command in a Pod: "
                                    f"{said or report.detail}")
    else:
        status = Status.DEFERRED
        why = ("the launch command was never parsed by this image, and its parser could not "
               "judge it now: " + (ran.failure or (verdict.detail if verdict is not None else
                                                   "the Pod printed no serve_args verdict")))
    if options.force_launch:
        return CheckResult(
            name="launch_parsed", status=Status.DEFERRED,
            data={**data, "forced": options.force_launch},
            detail=f"{why}; launched anyway, forced: {options.force_launch} ({shown})"[:800]
        ), switch
    return CheckResult(
        name="launch_parsed", status=status, data=data,
        detail=f"{why}; not submitted. Change the command, or pass --force-launch REASON "
               f"({shown})"[:800]), switch


def render(options: AcceptOptions, pinned: ImageReference, run: str, budget: int,
           pull_secrets: list[str], prefill_switch: str | None = None,
           template_dir: Path | None = None) -> tuple[dict, dict]:
    config = serve_config(options, prefill_switch)
    return engine_pod(config, pinned, ProbeBudget.covering(budget), name=f"{run}-engine",
                      namespace=options.namespace, node_selector=options.node_selector,
                      tolerations=options.tolerations,
                      priority_class_name=options.priority_class_name,
                      pull_secrets=pull_secrets, model_claim=options.model_claim,
                      deadline_seconds=int(options.timeout_s) + 600, gpus=options.gpus,
                      extra_env=options.engine_env, labels={"imagekit.dev/accept-run": run},
                      template_dir=template_dir)


def service_for(run: str, namespace: str, port: int) -> dict:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"{run}-engine", "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "imagekit"}},
            "spec": {"selector": {"imagekit.dev/accept-run": run,
                                  "imagekit.dev/role": "engine-server"},
                     "ports": [{"name": "http", "port": port, "targetPort": port}]}}


def controller_files(options: AcceptOptions, template_dir: Path | None = None
                     ) -> dict[str, str]:
    files = manifests.script_files("controller/controller.py", "controller/accept_suites.py",
                                   template_dir=template_dir)
    if options.matrix_text is not None:
        files["matrix.toml"] = options.matrix_text
    if options.engine_config_text is not None:
        files["engines.toml"] = options.engine_config_text
    # the cases always travel with the scripts (the controller image holds imagekit's code,
    # not its package data): the chosen set's text, else the default set's
    files["cases.toml"] = options.cases_text if options.cases_text is not None else \
        load_cases()[1]
    return files


def _refile(store: EvidenceStore, digest: Digest, reference: str, line: AttemptLine,
            controller_pod: str) -> str:
    """One attempt the controller made in its Pod, filed under the digest in the real store
    (its checks, its typed result, its files), with where it came from in its context."""
    record = line.attempt
    model = model_for(record.kind)
    context = {**record.context, "from_controller_pod": controller_pod,
               "in_pod_attempt": record.attempt_id}
    with store.attempt(digest, record.kind, subjects=[
            Subject.of(digest, Role.SUBJECT, reference)], **context) as attempt:
        if model is not None and record.result is not None:
            attempt.write_result(model.model_validate(record.result))
        for name, data in line.file_bytes().items():
            attempt.write_bytes(name, data)
        for check in record.checks:
            attempt.add_check(check)
    return record.kind


def _controller_check(pod: dict | None, results: list[ResultLine], harness: str | None,
                      filed: list[str]) -> CheckResult:
    """The controller itself: PASS when it ran the suites; ERROR (never FAIL: no verdict on
    the model) when it could not start a sub-script, the harness broke, or the Pod failed."""
    problems = [r.detail for r in results if r.status != "PASS"]
    phase = (pod or {}).get("status", {}).get("phase")
    data = {"pod_phase": phase, "results": [r.model_dump(exclude={"v"}) for r in results],
            "filed": filed}
    if harness:
        problems.append(f"harness error: {harness}")
    if problems or phase != "Succeeded":
        text = "; ".join(problems) or f"controller Pod {phase}"
        return CheckResult(name="controller", status=Status.ERROR, data=data,
                           detail=f"controller failure (not a model failure, not a request "
                                  f"error): {text}"[:800])
    return CheckResult(name="controller", status=Status.PASS, data=data,
                       detail=f"controller ran the suites; {len(filed)} attempt(s) filed")


# ------------------------------------------------------------------------------ the steps
# `run_accept` is these steps in order, each a function of typed input and output; the state
# they share is the `AcceptRun` (the run's identity, its attempt, its checks so far).

@dataclass
class AcceptRun:
    """What every step of one `cluster accept` shares."""

    kube: Kube
    reference: ImageReference
    digest: Digest
    options: AcceptOptions
    store: EvidenceStore
    hooks: Hooks
    attempt: Attempt
    run: str
    started: float
    checks: list[CheckResult] = field(default_factory=list)
    #: the Pod templates' folder (default the packaged manifests)
    manifests_dir: Path | None = None
    #: the namespace's enforced Pod Security level (`admit.prepare`)
    enforce: str = "privileged"
    #: the in-image probes' folder (default the packaged probes): the parse of a launch
    #: command no record shows parsed runs serve_args from here
    probes_dir: Path | None = None

    @property
    def pinned(self) -> ImageReference:
        return self.reference.with_digest(self.digest)

    @property
    def model(self) -> str | None:
        return self.options.served_model_name

    def seconds(self) -> float:
        return round(time.monotonic() - self.started, 3)


@dataclass(frozen=True)
class Plan:
    """The gates' outcome (step 1): the launch command, the startup budget, the spec."""

    parsed: CheckResult
    prefill_switch: str | None
    budget: int
    budget_source: str
    budget_check: CheckResult
    engine_pod: dict
    result: dict

    @property
    def refused(self) -> CheckResult | None:
        """The check that stops the run before anything is submitted: a FAIL, or a launch
        command nobody could judge (DEFERRED, unless forced)."""
        unjudged = self.parsed.status is Status.DEFERRED and not self.parsed.data.get("forced")
        return next((c for c in (self.parsed, self.budget_check)
                     if c.status is Status.FAIL or (c is self.parsed and unjudged)), None)


@dataclass
class Submitted:
    """What step 3 created: the engine Pod, its Service, the controller Pod (and their
    ConfigMaps and the run's pull Secret, all in `pods`)."""

    pods: PodRun
    engine_pod: dict
    engine_name: str
    controller_doc: dict
    controller_ref: ImageReference
    base_url: str


@dataclass
class ControllerOutcome:
    """What the controller Pod came to (step 5)."""

    checks: list[CheckResult]
    filed: list[str]


def plan(ctx: AcceptRun) -> Plan:
    """Step 1: the launch command parsed by the image's own engine? the startup budget?"""
    hooks, options = ctx.hooks, ctx.options
    hooks.stage("launch command", "parsed by this image's engine (serve_args)?")
    parsed_check, switch = launch_parsed(ctx.store, ctx.digest, options)
    if parsed_check.status is not Status.PASS:   # no record: the image's parser judges it now
        from imagekit.probe.runner import probes_dir

        hooks.step("never parsed before: the image's own parser judges it now, in a Pod")
        parsed_check, switch = parse_launch_now(
            ctx.kube, ctx.pinned, options, run=ctx.run, probes_dir=probes_dir(ctx.probes_dir),
            switch=switch, manifests_dir=ctx.manifests_dir, enforce=ctx.enforce,
            attempt=ctx.attempt)
    ctx.checks.append(parsed_check)
    hooks.step(f"{parsed_check.status.value} launch_parsed: {parsed_check.detail}")
    hooks.stage("startup budget")
    budget, source, budget_check = startup_budget(ctx.store, options, ctx.model)
    ctx.checks.append(budget_check)
    hooks.step(f"{budget_check.status.value} startup_budget: {budget_check.detail}")
    engine_pod_doc, _ = render(options, ctx.pinned, ctx.run, budget, [], switch,
                               ctx.manifests_dir)
    result = dict(reference=str(ctx.reference), pinned=str(ctx.pinned),
                  engine=options.engine.value, model=ctx.model, namespace=options.namespace,
                  engine_pod=engine_pod_doc["metadata"]["name"],
                  startup_budget_seconds=budget, budget_source=source)
    return Plan(parsed=parsed_check, prefill_switch=switch, budget=budget,
                budget_source=source, budget_check=budget_check, engine_pod=engine_pod_doc,
                result=result)


def precheck_spec(ctx: AcceptRun, spec: Plan) -> list[CheckResult]:
    """Step 2: the exact spec the API will see, prechecked before anything is created."""
    intent = PodIntent.from_pod(spec.engine_pod)
    ctx.hooks.stage("precheck", "the exact engine Pod spec")
    # the namespace's Pod Security level, judged on the engine Pod and the controller's
    # (rendered as it will be, but for the Service address known only once it exists)
    controller = manifests.render(
        "controller-pod.yaml.j2", template_dir=ctx.manifests_dir, name=f"{ctx.run}-controller",
        namespace=ctx.options.namespace, image=spec.engine_pod["spec"]["containers"][0]["image"],
        node_selector=ctx.options.node_selector, tolerations=ctx.options.tolerations,
        configmap=f"{ctx.run}-scripts", env=[], deadline_seconds=60)
    podsecurity.require([spec.engine_pod, controller], ctx.enforce, ctx.options.namespace)
    findings = precheck(ctx.kube, intent)
    ctx.checks.extend(findings)
    for finding in findings:
        ctx.hooks.step(f"{finding.status.value} {finding.name}: {finding.detail}")
    ctx.attempt.write_json("precheck.json", [c.model_dump(mode="json") for c in findings])
    return [c for c in findings if c.status is not Status.PASS]


def submit(ctx: AcceptRun, spec: Plan, pods: PodRun,
           controller_image: Callable[[], ImageReference]) -> Submitted:
    """Step 3: the launch ConfigMap, the engine Pod pinned by digest, its Service, the
    controller's scripts and the controller Pod (which waits for the engine)."""
    hooks, options, run = ctx.hooks, ctx.options, ctx.run
    hooks.stage("controller image")
    controller_ref = controller_image()
    hooks.stage("submit", str(ctx.pinned))
    secret = pods.pull_secret(ctx.reference.registry, options.docker_config_dir)
    engine_pod_doc, launch_cm = render(options, ctx.pinned, run, spec.budget,
                                       [secret] if secret else [], spec.prefill_switch)
    port = int(engine_pod_doc["spec"]["containers"][0]["ports"][0]["containerPort"])
    service = service_for(run, options.namespace, port)
    pods.create(launch_cm)
    pod = pods.create(engine_pod_doc)
    ctx.attempt.write_json("engine-pod.json", engine_pod_doc)
    svc = pods.create(service)
    base_url = f"http://{svc['spec']['clusterIP']}:{port}"
    hooks.step(f"engine Pod {pod['metadata']['name']} pinned to {ctx.pinned}; Service "
               f"{base_url}")
    scripts = manifests.configmap(f"{run}-scripts", options.namespace,
                                  controller_files(options, ctx.manifests_dir),
                                  labels={"imagekit.dev/role": "acceptance-controller"})
    env = {"READY_URL": f"{base_url}/health", "SUBSCRIPTS": "accept_suites.py",
           "READY_TIMEOUT": str(spec.budget + 120), "BASE_URL": base_url,
           "SUITES": ",".join(options.suites), "REQUIRE": ",".join(options.require),
           "DIGEST": str(ctx.digest), "MODEL": ctx.model or "",
           "MAX_TOKENS": str(options.max_tokens)}
    if options.matrix_text is not None:
        env["MATRIX"] = "matrix.toml"
    if options.engine_config_text is not None:
        env["ENGINE_CONFIG"] = "engines.toml"
    env["CASES"] = "cases.toml"
    if options.model_claim:
        env["MODEL_DIR"] = CONTROLLER_MODEL_MOUNT
    controller_doc = manifests.render(
        "controller-pod.yaml.j2", template_dir=ctx.manifests_dir, name=f"{run}-controller",
        namespace=options.namespace, model_claim=options.model_claim,
        model_mount=CONTROLLER_MODEL_MOUNT,
        image=controller_ref, node_selector=options.node_selector,
        tolerations=options.tolerations, pull_secrets=[],
        configmap=scripts["metadata"]["name"],
        env=[{"name": k, "value": v} for k, v in env.items()],
        deadline_seconds=int(options.timeout_s) + 600)
    pods.create(scripts)
    pods.create(controller_doc)
    ctx.attempt.write_json("controller-pod.json", controller_doc)
    hooks.step(f"controller Pod {controller_doc['metadata']['name']} "
               f"({controller_ref}) waits for the engine through the Service")
    hooks.controller_waiting(ctx.kube, options.namespace, scripts["metadata"]["name"])
    return Submitted(pods=pods, engine_pod=pod, engine_name=pod["metadata"]["name"],
                     controller_doc=controller_doc, controller_ref=controller_ref,
                     base_url=base_url)


def await_start(kube: Kube, options: AcceptOptions, name: str, tracker: PhaseTracker,
                budget: int, started: float) -> StartupOutcome:
    """Step 4: watch the engine Pod until it is ready or its start failed (re-judged every
    second: its events and the log follower's lines move without the Pod changing); the
    tracker learns when the container started (phase times are from there)."""
    deadline = started + min(options.timeout_s, budget + 300)
    created = time.monotonic()
    seconds: float | None = None
    pod: dict = {}
    for state in observe(kube.resource("Pod"), name, options.namespace, deadline=deadline,
                         tick=1.0):
        pod = state or {}
        began = container_started(pod)
        if began is not None and tracker.started is None:
            tracker.started = began
        since = (dt.datetime.now(dt.UTC) - began).total_seconds() if began else None
        seconds = round(since, 3) if since is not None else None
        if pod_ready(pod) and tracker.seen("api_ready"):
            return StartupOutcome(state="ready", seconds=tracker.ready_seconds or seconds)
        events = kube.events_for(options.namespace, "Pod", name)
        failure = failed_start(pod, events, list(tracker.tail), seconds)
        if failure is not None and (failure.state != "unschedulable"
                                    or time.monotonic() - created > 60):
            time.sleep(1.0)  # let the log follower read the last lines
            return failure.model_copy(update={"last_lines": list(tracker.tail)[-20:]})
    if pod_ready(pod):  # ready by the probe, the ready line not seen by the deadline
        return StartupOutcome(state="ready", seconds=tracker.ready_seconds or seconds)
    return StartupOutcome(state="timeout", seconds=seconds,
                          detail=f"not ready within {deadline - started:.0f} s",
                          last_lines=list(tracker.tail)[-20:])


def run_controller(ctx: AcceptRun, submitted: Submitted) -> ControllerOutcome:
    """Step 5: wait until the controller Pod ends, read its lines (the versioned protocol,
    `protocol.py`) and file every attempt it made under the digest."""
    name = submitted.controller_doc["metadata"]["name"]
    controller_pod = submitted.pods.wait_ended(
        name, max(ctx.options.timeout_s - (time.monotonic() - ctx.started), 30))
    log = ctx.kube.pod_logs(ctx.options.namespace, name)
    ctx.attempt.write_text("controller.log", log)
    try:
        said = parse_log(log)
    except ProtocolError as exc:
        return ControllerOutcome(checks=[CheckResult(
            name="controller", status=Status.ERROR,
            data={"pod_phase": (controller_pod or {}).get("status", {}).get("phase")},
            detail=f"controller failure (not a model failure, not a request error): its "
                   f"log breaks the line protocol: {exc.one_line()}"[:800])], filed=[])
    checks: list[CheckResult] = []
    filed: list[str] = []
    for line in said.attempts:
        filed.append(_refile(ctx.store, ctx.digest, str(ctx.reference), line, name))
        for check in line.attempt.checks:
            ctx.hooks.step(f"{check.status.value} {line.attempt.kind} "
                           f"{check.name}: {check.detail[:160]}")
        checks.extend(line.attempt.checks)
    checks.append(_controller_check(controller_pod, said.results, said.harness_error, filed))
    return ControllerOutcome(checks=checks, filed=filed)


def collect_engine(ctx: AcceptRun, pods: PodRun, lines: list[str]) -> None:
    """Step 6: the engine Pod's final status, its events and its log, into the attempt
    (when it was created at all)."""
    name = f"{ctx.run}-engine"
    if not any(o.get("kind") == "Pod" and o["metadata"]["name"] == name for o in pods.objects):
        return
    collected = pods.collect(name, "engine")
    if collected.pod is not None:
        ctx.attempt.write_json("engine-pod-status.json", collected.status)
        ctx.attempt.write_json("engine-events.json", collected.events)
    text = collected.log
    ctx.attempt.write_text("engine.log", text if not text.startswith(
        "(logs unavailable") or not lines else "\n".join(lines) + "\n")


def cleanup(ctx: AcceptRun, pods: PodRun, timeout: float = 120) -> None:
    """Step 7: delete everything in reverse order, then wait until each object is really
    gone (a Pod may stay Terminating; the next run's recreate must not meet it, section 6).
    What stayed is said (a `TransportError` naming it), never dropped."""
    ctx.hooks.stage("cleanup", "delete and wait until gone")
    report = pods.cleanup(timeout=timeout)
    if report.errors:
        raise TransportError("cleanup left: " + "; ".join(
            f"{label} ({error.one_line()})" for label, error in report.errors.items()),
            where=ctx.options.namespace)


def _not_submitted(ctx: AcceptRun, spec: Plan, summary: str, seconds: float) -> CheckReport:
    judged = budget_after_start(spec.budget_check, spec.budget, None, "nothing was submitted")
    ctx.checks = [judged if c is spec.budget_check else c for c in ctx.checks]
    ctx.attempt.write_json("engine-pod.json", spec.engine_pod)
    ctx.attempt.write_result(ClusterAcceptResult(**spec.result, seconds=seconds))
    ctx.attempt.finish(Status.FAIL, summary=summary, checks=ctx.checks)
    return CheckReport.of(str(ctx.pinned), ctx.checks, evidence=str(ctx.attempt.path))


def run_accept(kube: Kube, reference: ImageReference, digest: Digest, options: AcceptOptions,
               store: EvidenceStore, *, controller_image: Callable[[], ImageReference],
               hooks: Hooks | None = None,
               manifests_dir: Path | None = None,
               probes_dir: Path | None = None) -> CheckReport:
    """The flow above, as its steps. `controller_image` builds (or finds) the controller
    image and returns it pinned; it is called only once the precheck is clean. `probes_dir`:
    the in-image probes (default the packaged ones), for the parse of a new launch command."""
    hooks = hooks or Hooks()
    started = time.monotonic()
    run = f"accept-{digest.hex[:8]}-{secrets.token_hex(2)}"
    # permissions and the namespace, refused before anything exists (the Pods are judged
    # against its Pod Security level once rendered, `precheck_spec`)
    enforce = admit.prepare(kube, "accept", options.namespace)
    with store.attempt(digest, KIND, subjects=[Subject.of(digest, Role.SUBJECT,
                                                          str(reference))],
                       reference=str(reference), namespace=options.namespace, run=run,
                       engine=options.engine.value,
                       model=options.served_model_name) as attempt:
        ctx = AcceptRun(kube=kube, reference=reference, digest=digest, options=options,
                        store=store, hooks=hooks, attempt=attempt, run=run, started=started,
                        manifests_dir=manifests_dir, enforce=enforce, probes_dir=probes_dir)
        spec = plan(ctx)
        refused = spec.refused
        if refused is not None:
            hooks.end(refused.detail[:200])
            return _not_submitted(ctx, spec, "not submitted: " + refused.detail[:300], 0.0)
        findings = precheck_spec(ctx, spec)
        if findings:
            hooks.end("; ".join(f"{c.name}: {c.detail}" for c in findings)[:300])
            return _not_submitted(ctx, spec, "not submitted: precheck findings",
                                  ctx.seconds())

        pods = PodRun(kube, options.namespace, run)
        tracker = PhaseTracker(on_phase=hooks.phase)
        lines: list[str] = []
        submitted: Submitted | None = None
        outcome: StartupOutcome | None = None
        filed: list[str] = []
        controller_ref: ImageReference | None = None

        def on_line(line: str) -> None:
            lines.append(line)
            tracker.feed(line)
            hooks.log_line(line)

        try:
            submitted = submit(ctx, spec, pods, controller_image)
            controller_ref = submitted.controller_ref
            pods.follow(submitted.engine_name, "engine", on_line)
            outcome = await_start(kube, options, submitted.engine_name, tracker, spec.budget,
                                  started)
            seen = observed(kube.get_pod(options.namespace, submitted.engine_name))
            if outcome.state == "ready":
                hooks.stage("suites", f"engine ready after {outcome.seconds} s; the controller "
                                      "runs " + ", ".join(options.suites +
                                                          (["load matrix"] if options.matrix_text
                                                           else [])))
                ctx.checks.append(CheckResult(
                    name="engine_start", status=Status.PASS,
                    detail=f"API ready after {outcome.seconds} s; phases "
                           + ", ".join(f"{p.name} {p.seconds} s" for p in tracker.phases),
                    data={"phases": [p.model_dump() for p in tracker.phases],
                          "observed": seen}))
                done = run_controller(ctx, submitted)
                ctx.checks.extend(done.checks)
                filed = done.filed
            else:
                last = list(tracker.tail)[-20:]
                error = engine_error_line(last)
                outcome = outcome.model_copy(update={"last_lines": last})
                ctx.checks.append(CheckResult(
                    name="engine_start", status=Status.FAIL,
                    data={**outcome.model_dump(), "observed": seen},
                    detail=f"startup failed ({outcome.state}): {outcome.detail}"
                           + (f"; engine said: {error}" if error else "")))
                hooks.end(ctx.checks[-1].detail[:300])
                name = submitted.controller_doc["metadata"]["name"]
                attempt.write_text("controller.log", kube.pod_logs(options.namespace, name))
                ctx.checks.append(CheckResult(name="controller", status=Status.DEFERRED,
                                              detail="the engine never became ready: the "
                                                     "suites did not run (no model verdict)"))
        finally:
            for follower in pods.followers:
                follower.stop.set()
            collect_engine(ctx, pods, lines)
            if not options.keep:
                cleanup(ctx, pods)
            hooks.end()
        ready = outcome is not None and outcome.state == "ready" and tracker.ready_seconds
        if ready:
            _record_startup(store, digest, reference, options, ctx.model, tracker,
                            attempt.path)
        judged = budget_after_start(
            spec.budget_check, spec.budget, tracker.ready_seconds if ready else None,
            "the engine never became ready here" if outcome is None or outcome.state != "ready"
            else "the engine's log showed no API-ready phase to time")
        ctx.checks = [judged if c is spec.budget_check else c for c in ctx.checks]
        attempt.write_json("phases.json", [p.model_dump() for p in tracker.phases])
        attempt.write_result(ClusterAcceptResult(
            **spec.result, controller_pod=f"{run}-controller",
            controller_image=str(controller_ref), phases=list(tracker.phases),
            startup=outcome,
            controller=next((c.status for c in ctx.checks if c.name == "controller"), None),
            filed=filed, seconds=ctx.seconds()))
        for check in ctx.checks:
            attempt.add_check(check)
    return CheckReport.of(str(ctx.pinned), ctx.checks, evidence=str(attempt.path))


def _record_startup(store: EvidenceStore, digest: Digest, reference: ImageReference,
                    options: AcceptOptions, model: str | None, tracker: PhaseTracker,
                    where: Path) -> None:
    observed = tracker.ready_seconds or 0.0
    with store.attempt(digest, "engine-startup", subjects=[
            Subject.of(digest, Role.SUBJECT, str(reference))], engine=options.engine.value,
            model=model, source="cluster-accept", cluster_accept=str(where)) as attempt:
        attempt.write_text("startup.log", "\n".join(tracker.tail) + "\n")
        attempt.write_json("phases.json", [p.model_dump() for p in tracker.phases])
        attempt.write_result(EngineStartupResult(
            engine=options.engine.value, log=str(where / "engine.log"), lines=tracker.lines,
            observed_seconds=round(observed, 3), required_seconds=float(required_for(observed))))
        attempt.add_check(CheckResult(name="startup_observed", status=Status.PASS,
                                      detail=f"API ready {observed:.1f} s after the container "
                                             "started (live phases)"))
