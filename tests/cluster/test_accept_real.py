"""`imagekit cluster accept` on the real cluster with the real vLLM (CPU platform) serving the
real instruct model (SmolLM2-135M-Instruct) from a read-only PVC, its answers judged by the
`stand-in` cases. Each vLLM start costs about a minute on two shared
cores, so one ready start serves the by-tag flow with the rehearsal step's suites (functional,
needle, the stand-in matrix, judged as the rehearsal judges them), the ConfigMap switch under
the waiting controller (section 9) and, from its recorded start, the budget finding; the broken
engine is a second (short) start. Findings made before submission start nothing."""

from __future__ import annotations

import datetime as dt
import json
import secrets
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from imagekit.clusteraccept import rehearsal as rehearsal_step
from imagekit.clusteraccept.run import (
    CPU_ENGINE_ARGS,
    CPU_ENGINE_ENV,
    AcceptOptions,
    Hooks,
    run_accept,
)
from imagekit.evidence import EvidenceStore
from imagekit.oci import ImageReference
from imagekit.results import Status

pytestmark = [pytest.mark.cluster, pytest.mark.docker, pytest.mark.engine, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"     # the name images.toml's serve command parsed
SELECTOR = {"imagekit.dev/model-storage": "local"}
TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


@pytest.fixture(scope="module")
def accept_ns(kube):
    """The operator's namespace: labelled enforce restricted, with the ServiceAccount and
    least-privilege RBAC that `imagekit cluster rbac` prints (applied by the administrator)."""
    from .operator import grant

    name = f"ik-accept-{secrets.token_hex(3)}"
    grant(kube, name)
    yield name
    kube.call("DELETE", f"/api/v1/namespaces/{name}")
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        kube.resource(kind, "rbac.authorization.k8s.io/v1").delete(
            f"imagekit-read-{name}-imagekit")


@pytest.fixture(scope="module")
def model_claim(kube, accept_ns):
    """The instruct model on a local PV only nodes labelled imagekit.dev/model-storage=local
    can mount, and its read-only claim; the node gets the label (it is left: others use it)."""
    from imagekit.cluster.modelvolume import delete_model_volume, ensure_model_volume, label_node
    from imagekit.standins.instruct import ensure_instruct_model

    from .helpers import NODE

    label_node(kube, NODE)
    volume = f"{accept_ns}-model"
    made = ensure_model_volume(kube, volume, "model", accept_ns,
                               str(ensure_instruct_model().snapshot))
    yield made.claim
    delete_model_volume(kube, volume, "model", accept_ns)


def _rehearsal_suites() -> dict:
    """What the rehearsal's `cluster accept` step runs (imagekit.clusteraccept.rehearsal
    `accept_args`): functional, needle and the stand-in matrix's load rounds, judged below as
    the rehearsal judges them. The one ready start of this module serves them all."""
    return {"suites": ["functional", "needle"],
            "matrix_text": Path(rehearsal_step.MATRIX).read_text(),
            "max_tokens": rehearsal_step.MAX_TOKENS}


def _options(ns: str, claim: str, **extra) -> AcceptOptions:
    from imagekit.acceptance.cases import load as load_cases
    from imagekit.infra.state import registry_trust

    return AcceptOptions(namespace=ns, model_claim=claim, served_model_name=MODEL,
                         cases_text=load_cases("stand-in")[1],
                         engine_env=CPU_ENGINE_ENV,
                         engine_args=[*CPU_ENGINE_ARGS, *extra.pop("engine_args", [])],
                         node_selector=SELECTOR, tolerations=TOLERATIONS, max_context=4096,
                         docker_config_dir=registry_trust("127.0.0.1:5001").get(
                             "docker_config"), timeout_s=900, **extra)


def _controller_image():
    from imagekit.clusteraccept.controller_image import ensure_controller_image
    from imagekit.engine import Engine
    from imagekit.infra.state import load_state

    return ensure_controller_image(Engine(), load_state().registry("staging").address).pinned


def _resolve(tag: ImageReference):
    from imagekit.infra.state import registry_trust
    from imagekit.registry import RegistryClient, RegistryOptions

    with RegistryClient(tag.registry, RegistryOptions(**registry_trust(tag.registry))) as c:
        return c.resolve_tag(tag.repository, tag.tag)


class _Switch(Hooks):
    """Switches the scripts ConfigMap (generation 2) as soon as the controller runs and waits
    for the engine — the record's section 9 — and notes when. The switch is someone else's
    write (`admin`): the run's own identity may not update ConfigMaps, since no command does."""

    def __init__(self, admin) -> None:  # noqa: ANN001 - a Kube
        super().__init__()
        self.admin = admin
        self.error: BaseException | None = None
        self.switched_at: dt.datetime | None = None
        self.lines: list[str] = []
        self.thread: threading.Thread | None = None

    def step(self, text: str) -> None:
        self.lines.append(text)
        super().step(text)

    def controller_waiting(self, kube, namespace: str, configmap: str) -> None:
        pod = configmap.removesuffix("-scripts") + "-controller"

        def switch() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if "engine not ready" not in (log := kube.pod_logs(namespace, pod)) and \
                        "controller: scripts in" in log:
                    break
                time.sleep(1)
            current = self.admin.get(f"/api/v1/namespaces/{namespace}/configmaps/{configmap}")
            self.admin.replace({**current, "data": {**current["data"], "generation": "2\n"}})
            self.switched_at = dt.datetime.now(dt.UTC)

        def switch_noting_why() -> None:
            try:
                switch()
            except BaseException as exc:   # noqa: BLE001 - the test names it
                self.error = exc

        self.thread = threading.Thread(target=switch_noting_why, daemon=True)
        self.thread.start()


#: the exec plugin's token life in the accept run
TOKEN_TTL_S = 20


@pytest.fixture(scope="module")
def exec_kube(cluster_state, tmp_path_factory, kube, accept_ns):
    """The accept run goes through the authenticating front (tests/cluster/kube_front.py)
    with a kubeconfig whose exec plugin mints 20-second tokens: a managed cluster's credential,
    renewed many times during one engine start (renewed 2 s before expiry, a tenth of the
    life: a shorter life leaves less than a loaded 2-core machine may take between the
    check and the request's arrival); the front closes pooled connections after
    streamed answers without announcing it. Behind the front it is the namespace's
    ServiceAccount, bound by `cluster rbac`: never the administrator."""
    from imagekit.cluster.kube import Kube

    from .kube_front import KubeFront, exec_kubeconfig, plugin_state
    from .operator import token_kubeconfig

    folder = tmp_path_factory.mktemp("accept-front")
    operator = token_kubeconfig(kube, cluster_state.kubeconfig, accept_ns, "imagekit",
                                folder / "operator.kubeconfig")
    # the front also closes a kept-alive connection after each streamed answer without
    # saying so, as a load balancer may: every watch and followed log meets a closed one
    front = KubeFront(operator, folder, close_after_stream=True)
    state = plugin_state(folder / "plugin", front.key)
    config = exec_kubeconfig(folder / "kubeconfig", front.url, front.cert, state, ttl=TOKEN_TTL_S)
    with Kube(config) as client:
        yield client, state, front
    front.stop()


@pytest.fixture(scope="module")
def accepted(exec_kube, kube, accept_ns, model_claim, vllm_image, checkov, tmp_path_factory):
    tag, digest, store = vllm_image
    assert str(_resolve(tag)) == str(digest)
    from .operator import PodsSeen

    hooks = _Switch(kube)
    started = time.monotonic()
    with PodsSeen(exec_kube[0], accept_ns) as seen:
        report = run_accept(exec_kube[0], tag, _resolve(tag), _options(
            accept_ns, model_claim, **_rehearsal_suites()), store,
            controller_image=_controller_image, hooks=hooks)
    # every Pod of the run, as the API server stored it, meets restricted
    from imagekit.cluster import podsecurity

    assert {p["metadata"]["labels"].get("imagekit.dev/role") for p in seen.pods.values()} == \
        {"engine-server", "acceptance-controller"}
    for pod in seen.pods.values():
        assert podsecurity.violations(pod, "restricted") == [], pod["metadata"]["name"]
    # and checkov, the independent checker, agrees on the same stored Pods
    from .pss import assert_both_admit

    assert_both_admit(checkov, {p["metadata"]["name"]: p for p in seen.pods.values()},
                      tmp_path_factory.mktemp("accept-pods"))
    return report, hooks, store, digest, time.monotonic() - started


@pytest.mark.parametrize("signum", ["SIGTERM"])   # one handler for both: test_stop_signals.py
def test_an_interrupted_accept_leaves_nothing_behind(kube, accept_ns, model_claim, vllm_image,
                                                     cluster_state, tmp_path, signum) -> None:
    """`cluster accept` as the ServiceAccount, stopped while the engine loads: exit 130 in one
    line, and no Pod, ConfigMap, Secret or Service is left. The rerun that passes is the next
    test's run (`accepted`), in the same namespace."""
    import os
    import shutil
    import signal

    from imagekit.clusteraccept.rehearsal import STORAGE_SELECTOR

    from .operator import namespace_objects, token_kubeconfig

    tag, _, store = vllm_image
    evidence = tmp_path / "evidence"
    shutil.copytree(store.root, evidence)        # the shared store keeps one accept attempt
    config = token_kubeconfig(kube, cluster_state.kubeconfig, accept_ns, "imagekit",
                              tmp_path / "operator.kubeconfig")
    process = subprocess.Popen(
        [sys.executable, "-m", "imagekit", "cluster", "accept", str(tag), "--device", "cpu",
         "--namespace", accept_ns, "--model-claim", model_claim, "--served-model-name", MODEL,
         "--selector", STORAGE_SELECTOR, "--engine-env", "MAX_CONTEXT=4096", "--cases", "stand-in",
         "--kubeconfig", str(config),
         "--evidence-dir", str(evidence), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "DOCKER_CONFIG": str(cluster_state.docker_config_dir)})
    deadline = time.monotonic() + 300
    running = False
    while time.monotonic() < deadline and process.poll() is None and not running:
        pods = kube.resource("Pod").list(accept_ns,
                                         label_selector="imagekit.dev/role=engine-server")
        running = any(p.get("status", {}).get("phase") == "Running" for p in pods)
        time.sleep(0.5)
    assert running, process.communicate(timeout=60)
    process.send_signal(getattr(signal, signum))
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130, err
    assert err.strip().splitlines()[-1] == \
        f"imagekit: error: interrupted by {signum} (imagekit cluster accept)", err
    assert namespace_objects(kube, accept_ns) == []


def test_accept_by_tag_records_phases_and_leaves_nothing(accepted, kube, accept_ns,
                                                         exec_kube) -> None:
    report, hooks, store, digest, seconds = accepted
    checks = {c.name: c for c in report.checks}
    # the launch command is one the image's own vLLM parsed (images verify's serve_args)
    assert checks["launch_parsed"].status is Status.PASS, checks["launch_parsed"]
    assert "vllm 0.32.0" in checks["launch_parsed"].detail
    assert checks["engine_start"].status is Status.PASS, "\n".join(hooks.lines)
    assert checks["controller"].status is Status.PASS, checks["controller"]
    [record] = store.attempts(str(digest), "cluster-accept")
    result = store.result(record)
    names = [p.name for p in result.phases]
    assert names[0] == "engine_started" and "weights_loaded" in names and \
        names[-1] == "api_ready", names
    seconds_of = {p.name: p.seconds for p in result.phases}
    assert 0 < seconds_of["weights_loaded"] <= seconds_of["api_ready"]
    assert result.startup.state == "ready" and result.pinned.endswith(str(digest))
    folder = store.path_of(record)
    for name in ("engine-pod.json", "controller-pod.json", "engine.log", "controller.log",
                 "phases.json"):
        assert (folder / name).is_file(), name
    assert "Application startup complete" in (folder / "engine.log").read_text()
    # the suites ran in the controller Pod and were filed under the engine digest
    [functional] = store.attempts(str(digest), "accept-functional")
    assert functional.context["from_controller_pod"] == result.controller_pod
    by_name = {c.name: c for c in functional.checks}
    stream = by_name["streaming"]
    assert stream.data["protocol"]["status"] == "PASS", stream
    # a real model's answers, judged by the stand-in cases: streamed equals non-streamed
    assert stream.data["semantic"]["status"] == "PASS", stream
    assert store.attempts(str(digest), "engine-startup")               # the next budget
    # both Pods (and the Service, the ConfigMaps) are gone
    assert kube.list(f"/api/v1/namespaces/{accept_ns}/pods") == []
    assert kube.list(f"/api/v1/namespaces/{accept_ns}/services") == []
    # through short-lived tokens: the plugin was re-run all along, none ran out on the way
    _, plugin_state, front = exec_kube
    runs = len((plugin_state / "runs").read_text().splitlines())
    assert runs > seconds / TOKEN_TTL_S * 0.5, (runs, seconds)
    assert front.expired == 0 and front.forwarded > 0
    assert front.reused > 0 and front.dropped > 0        # pooled, and closed under it
    print(f"\nACCEPT-TIMING engine start {seconds_of['api_ready']:.1f} s, whole run "
          f"{seconds:.1f} s")


def test_the_rehearsal_step_judges_the_accepted_run_pass_under_the_local_profile(
        accepted) -> None:
    """The rehearsal's verdict on this run, from what it observed: every protocol aspect and
    every judged semantic check PASS, the load rounds ran and PASS, and each DEFERRED (the
    capabilities this text model lacks) is one the `local` profile allows, by name."""
    from imagekit import packaged
    from imagekit.spec import load_spec

    report = accepted[0].model_dump(mode="json")
    names = {c["name"] for c in report["checks"]}
    assert {"needle-original", "needle-explicit", "matrix-totals"} <= names, sorted(names)
    local = load_spec(packaged.path("dockerfiles", "images.toml")).profiles["local"]
    judged = rehearsal_step.standin_acceptance_check(
        "accept", report, local.cluster_accept_allowances("vllm"), "local")
    assert judged.status is Status.PASS, judged.detail
    # the same report without the profile's leave: its DEFERRED checks are named, not passed
    unallowed = rehearsal_step.standin_acceptance_check("accept", report, {}, "local")
    assert unallowed.status is Status.DEFERRED, unallowed.detail


def test_configmap_switched_while_the_controller_waits_and_the_run_completes(accepted) -> None:
    report, hooks, store, digest, _ = accepted
    [record] = store.attempts(str(digest), "cluster-accept")
    result = store.result(record)
    ready_at = dt.datetime.fromisoformat(next(p.at for p in result.phases
                                              if p.name == "api_ready"))
    assert hooks.switched_at is not None and hooks.switched_at < ready_at, \
        f"the ConfigMap was not switched while the controller waited ({hooks.error!r})"
    log = (store.path_of(record) / "controller.log").read_text()
    assert "accept_suites: scripts generation 2" in log, log[-2000:]   # the new version ran
    assert "No such file or directory" not in log
    assert {c.name: c for c in report.checks}["controller"].status is Status.PASS


def test_a_budget_shorter_than_the_observed_start_is_reported_before_submission(
        accepted, kube, accept_ns, model_claim) -> None:
    _, _, store, digest, _ = accepted
    tag = ImageReference.parse(store.result(store.attempts(str(digest),
                                                           "cluster-accept")[0]).reference)
    report = run_accept(kube, tag, digest, _options(accept_ns, model_claim, startup_seconds=5),
                        store, controller_image=lambda: pytest.fail("nothing is to be built"))
    parsed, check = report.checks        # the launch command passed serve_args; the budget not
    assert parsed.name == "launch_parsed" and parsed.status is Status.PASS
    assert check.name == "startup_budget" and check.status is Status.FAIL
    assert "shorter than the last observed start" in check.detail and "not submitted" in \
        check.detail
    assert kube.list(f"/api/v1/namespaces/{accept_ns}/pods") == []


def test_a_node_without_the_storage_label_is_a_finding_and_nothing_is_created(
        kube, accept_ns, vllm_image) -> None:
    from imagekit.cluster.modelvolume import delete_model_volume, volume_manifests
    from imagekit.clusteraccept.model import standin_text_model as _standin_snapshot

    tag, digest, store = vllm_image
    key = f"imagekit.dev/model-storage-{secrets.token_hex(3)}"     # no node carries it
    pv, pvc = volume_manifests(f"{accept_ns}-other", "other", accept_ns,
                               str(_standin_snapshot()), label_key=key)
    kube.create(pv)
    kube.create(pvc)
    try:
        report = run_accept(kube, tag, digest, _options(accept_ns, "other"), store,
                            controller_image=lambda: pytest.fail("nothing is to be built"))
        finding = {c.name: c for c in report.checks}["volume_node_affinity"]
        assert finding.status is Status.FAIL and "node 127.0.0.1 lacks the storage " \
            "capability" in finding.detail and key in finding.detail
        assert kube.list(f"/api/v1/namespaces/{accept_ns}/pods") == []
        cli = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "precheck",
                              "--node", "127.0.0.1", "--model-claim", "other", "--namespace",
                              accept_ns, "--toleration", "nvidia.com/gpu:NoSchedule", "--json"],
                             capture_output=True, text=True, timeout=120, check=False)
        assert cli.returncode == 1, cli.stderr
        checks = {c["name"]: c for c in json.loads(cli.stdout)["checks"]}
        assert checks["volume_node_affinity"]["data"]["node"] == "127.0.0.1"
    finally:
        delete_model_volume(kube, f"{accept_ns}-other", "other", accept_ns)


def test_a_broken_engine_is_a_failed_start_not_a_model_failure(
        accepted, kube, accept_ns, model_claim, vllm_image) -> None:
    tag, digest, store = vllm_image
    before = len(store.attempts(str(digest), "accept-functional"))
    report = run_accept(kube, tag, digest, _options(
        accept_ns, model_claim, engine_args=["--no-such-engine-flag"],
        force_launch="test: the crash path of an engine start"), store,
        controller_image=_controller_image)
    checks = {c.name: c for c in report.checks}
    # never parsed by this image (serve_args): launched only because it was forced, and said so
    assert checks["launch_parsed"].status is Status.DEFERRED
    assert "forced: test: the crash path" in checks["launch_parsed"].detail
    start = checks["engine_start"]
    assert start.status is Status.FAIL and start.detail.startswith("startup failed (crashed)")
    assert "--no-such-engine-flag" in start.detail, start.detail     # vLLM's own error line
    assert checks["controller"].status is Status.DEFERRED               # no model verdict
    assert len(store.attempts(str(digest), "accept-functional")) == before
    records = store.attempts(str(digest), "cluster-accept")
    failed = [r for r in records if store.result(r).startup and
              store.result(r).startup.state == "crashed"]
    assert failed and "--no-such-engine-flag" in (store.path_of(failed[-1]) /
                                                 "engine.log").read_text()
    assert kube.list(f"/api/v1/namespaces/{accept_ns}/pods") == []


def test_a_launch_command_the_images_parser_rejects_is_refused_before_submission(
        kube, accept_ns, model_claim, vllm_image) -> None:
    """Never parsed before, so the image's own vLLM parser judges it now, in a Pod: it
    rejects the option, in its own words, and the engine is never started."""
    tag, digest, store = vllm_image
    report = run_accept(kube, tag, digest, _options(
        accept_ns, model_claim, engine_args=["--num-scheduler-steps", "8"]), store,
        controller_image=lambda: pytest.fail("nothing is to be built"))
    checks = {c.name: c for c in report.checks}
    refused = checks["launch_parsed"]
    assert refused.status is Status.FAIL and "not submitted" in refused.detail
    assert "vllm 0.32.0 parser rejected the launch command in a Pod" in refused.detail
    assert "does not accept --num-scheduler-steps" in refused.detail, refused.detail
    assert "--force-launch" in refused.detail
    assert "engine_start" not in checks                     # no engine was created
    assert kube.list(f"/api/v1/namespaces/{accept_ns}/pods") == []
    log = (Path(report.evidence) / "launch-parse" / "pod.log").read_text()
    assert "==> imagekit-probe serve_args" in log and "--num-scheduler-steps" in log


def test_a_new_context_length_and_model_name_are_parsed_now_in_a_pod(
        kube, accept_ns, vllm_image) -> None:
    """The launch step alone, against the cluster: a --max-context and a model name no
    serve_args record holds are judged by the image's own parser in a zero-GPU Pod (seconds),
    not refused for want of a spec edit; a bad option is rejected in the parser's words."""
    from imagekit.clusteraccept.run import launch_parsed, parse_launch_now
    from imagekit.probe.runner import probes_dir

    tag, digest, store = vllm_image
    options = _options(accept_ns, "model").model_copy(
        update={"max_context": 8192, "served_model_name": "team-a/smollm"})
    recorded, _ = launch_parsed(store, digest, options)
    assert recorded.status is Status.FAIL                  # no record: before, not submitted
    started = time.monotonic()
    check, _ = parse_launch_now(kube, tag.with_digest(digest), options,
                                run=f"accept-{secrets.token_hex(4)}", probes_dir=probes_dir(),
                                enforce="restricted")
    seconds = time.monotonic() - started
    assert check.status is Status.PASS, check.detail
    assert check.detail.startswith("parsed now by this image's own vllm 0.32.0 parser in a "
                                   "Pod"), check.detail
    assert "context 8192" in check.detail
    argv = check.data["argv"]
    assert argv[argv.index("--max-model-len") + 1] == "8192"
    assert argv[argv.index("--served-model-name") + 1] == "team-a/smollm"
    assert check.data["parsed_now"]["serve_args"]["commands"][0]["argv"] == argv
    assert kube.list(f"/api/v1/namespaces/{accept_ns}/pods") == []
    bad = options.model_copy(update={"engine_args": [*options.engine_args,
                                                     "--no-such-engine-flag"]})
    check, _ = parse_launch_now(kube, tag.with_digest(digest), bad,
                                run=f"accept-{secrets.token_hex(4)}", probes_dir=probes_dir(),
                                enforce="restricted")
    assert check.status is Status.FAIL and "not submitted" in check.detail
    assert "does not accept --no-such-engine-flag" in check.detail, check.detail
    assert kube.list(f"/api/v1/namespaces/{accept_ns}/pods") == []
    print(f"\nPARSE-NOW-TIMING {seconds:.1f} s")


def test_cli_refuses_an_image_without_image_phase_evidence(tmp_path, vllm_image) -> None:
    tag, _, _ = vllm_image
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "accept", str(tag),
                           "--evidence-dir", str(tmp_path), "--device", "cpu"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    assert "no image-phase evidence" in done.stderr and "Traceback" not in done.stderr


def test_a_startup_probe_that_runs_out_is_a_probe_timeout_not_a_crash(
        kube, accept_ns, model_claim, vllm_image, tmp_path) -> None:
    """No observed start in this store, so a 10 s budget is submitted; the kubelet stops the
    engine after its failed startup probes: probe-timeout, with the engine's last lines."""
    tag, digest, _ = vllm_image
    report = run_accept(kube, tag, digest, _options(
        accept_ns, model_claim, startup_seconds=10,
        force_launch="test: a fresh store holds no serve_args record"),
        EvidenceStore(tmp_path), controller_image=_controller_image)
    start = {c.name: c for c in report.checks}["engine_start"]
    assert start.status is Status.FAIL and "startup failed (probe-timeout)" in start.detail
    assert start.data["last_lines"], start.data
    assert kube.list(f"/api/v1/namespaces/{accept_ns}/pods") == []
