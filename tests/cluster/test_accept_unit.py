"""`cluster accept` without a cluster: the model volume's manifests and node affinity, live
phases from a vLLM log, failed starts told apart, the startup budget from evidence, the
controller's attempts filed under the digest, the engine Pod as rendered."""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from pathlib import Path

import pytest

from imagekit import packaged
from imagekit.evidence import EvidenceStore
from imagekit.results import CheckResult, Status
from imagekit.spec import Acceptance

from .fake_api import FakeKube

DIGEST = "sha256:" + "b" * 64
IMAGE = "127.0.0.1:5001/imagekit/vllm@" + DIGEST

# the lines vLLM 0.32 (CPU) prints on its way up, and argparse's refusal of a bad flag
VLLM_START = """\
launch.sh: exec vllm serve /models/model --tensor-parallel-size 1
INFO 12-01 10:00:01 [__init__.py:216] Automatically detected platform cpu.
INFO 12-01 10:00:09 [default_loader.py:267] Loading weights took 0.05 seconds
INFO 12-01 10:00:09 [cpu_model_runner.py:105] Model loading took 0.0123 GiB and 0.21 seconds
INFO 12-01 10:00:30 [api_server.py:1900] Starting vLLM API server 0 on http://0.0.0.0:8000
INFO:     Application startup complete.
"""


def test_model_volume_is_read_only_prebound_and_node_affine() -> None:
    from imagekit.cluster.modelvolume import STORAGE_LABEL_KEY, volume_manifests

    pv, pvc = volume_manifests("m-pv", "m", "ns", "/var/lib/imagekit/models/x")
    assert pv["spec"]["accessModes"] == pvc["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["claimRef"]["name"] == "m" and pvc["spec"]["volumeName"] == "m-pv"
    [term] = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["key"] == STORAGE_LABEL_KEY
    with pytest.raises(Exception, match="absolute"):
        volume_manifests("a", "b", "ns", "relative/path")


def test_node_affinity_matching_names_what_the_node_lacks() -> None:
    from imagekit.cluster.modelvolume import node_matches_affinity, volume_manifests

    pv, _ = volume_manifests("m-pv", "m", "ns", "/m")
    assert node_matches_affinity(pv, {"imagekit.dev/model-storage": "local"}) == (True, [])
    ok, lacking = node_matches_affinity(pv, {"nvidia.com/gpu.present": "true"})
    assert not ok and lacking == ["imagekit.dev/model-storage In ['local']"]
    assert node_matches_affinity({"spec": {}}, {})[0]           # no affinity: any node


def _FakeKube(labels: dict[str, str]) -> FakeKube:
    """Only what the precheck reads (a unit test of the finding's wording; the real cluster
    case is in test_accept_real.py)."""
    from imagekit.cluster.modelvolume import volume_manifests

    pv, pvc = volume_manifests("m-pv", "m", "ns", "/m")
    return FakeKube({
        "/api/v1/nodes": [{"metadata": {"name": "cpu-node", "labels": labels},
                           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}],
        "/api/v1/namespaces/ns/persistentvolumeclaims/m": pvc,
        "/api/v1/persistentvolumes/m-pv": pv})


def test_precheck_names_the_node_without_the_storage_label() -> None:
    from imagekit.cluster.precheck import PodIntent, precheck

    pod = {"metadata": {"namespace": "ns"},
           "spec": {"nodeName": "cpu-node", "containers": [{"name": "c"}],
                    "volumes": [{"name": "model", "persistentVolumeClaim": {"claimName": "m"}}]}}
    intent = PodIntent.from_pod(pod)
    assert intent.claims == ["m"]
    found = {c.name: c for c in precheck(_FakeKube({}), intent)}
    check = found["volume_node_affinity"]
    assert check.status is Status.FAIL and "node cpu-node lacks the storage capability" in \
        check.detail and check.data["node"] == "cpu-node"
    good = {c.name: c for c in precheck(_FakeKube({"imagekit.dev/model-storage": "local"}),
                                        intent)}
    assert good["volume_node_affinity"].status is Status.PASS


def test_phases_are_stamped_as_their_lines_arrive() -> None:
    from imagekit.clusteraccept.phases import PhaseTracker

    t0 = dt.datetime(2026, 12, 1, 10, 0, 0, tzinfo=dt.UTC)
    seen = []
    tracker = PhaseTracker(started=t0, on_phase=seen.append)
    for n, line in enumerate(VLLM_START.splitlines()):
        tracker.feed(line, now=t0 + dt.timedelta(seconds=10 * n))
    assert [p.name for p in seen] == ["engine_started", "weights_loaded", "api_ready"]
    assert [p.seconds for p in seen] == [0.0, 20.0, 50.0]     # no graphs: --enforce-eager
    assert tracker.ready_seconds == 50.0 and "Loading weights took" in seen[1].line


def test_failed_starts_are_told_apart() -> None:
    from imagekit.clusteraccept.phases import engine_error_line, failed_start

    def pod(state: dict, phase: str = "Running") -> dict:
        return {"status": {"phase": phase, "containerStatuses": [{"state": state}]}}

    crash = failed_start(pod({"terminated": {"exitCode": 2, "reason": "Error"}}, "Failed"), [],
                         ["vllm: error: unrecognized arguments: --no-such-flag"])
    assert crash.state == "crashed" and crash.exit_code == 2
    assert engine_error_line(crash.last_lines) == \
        "vllm: error: unrecognized arguments: --no-such-flag"
    assert failed_start(pod({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}), [],
                        []).state == "oom-killed"
    assert failed_start(pod({"waiting": {"reason": "ErrImagePull", "message": "not found"}}),
                        [], []).state == "image-pull-error"
    probing = [{"message": "Startup probe failed: urlopen error [Errno 111]"}]
    assert failed_start(pod({"terminated": {"exitCode": 2, "reason": "Error"}}), probing,
                        []).state == "crashed"     # probes fail until the API is up
    probe = failed_start(pod({"terminated": {"exitCode": 137, "reason": "Error"}}), [
        *probing, {"message": "Container engine failed startup probe, will be restarted"}], [])
    assert probe.state == "probe-timeout" and "failed startup probe" in probe.detail
    killed = pod({"terminated": {"exitCode": 130, "reason": "Error"}})   # what v1.20 says
    killed["spec"] = {"containers": [{"startupProbe": {"failureThreshold": 2}}]}
    events = [{"reason": "Unhealthy", "count": 2, "message": "Startup probe failed: x"},
              {"reason": "Killing", "message": "Stopping container engine"}]
    assert failed_start(killed, events, []).state == "probe-timeout"
    assert failed_start(killed, events[:1], []).state == "crashed"
    assert failed_start(pod({"running": {"startedAt": "2026-12-01T10:00:00Z"}}), [], []) is None


def _startup_evidence(store: EvidenceStore, observed: float, model: str) -> None:
    from imagekit.evidence.kinds import EngineStartupResult

    with store.attempt(DIGEST, "engine-startup", engine="vllm", model=model) as attempt:
        attempt.write_result(EngineStartupResult(engine="vllm", log="engine.log",
                                                 observed_seconds=observed))


def test_budget_from_the_last_observed_start_and_a_short_one_is_a_finding(
        tmp_path: Path) -> None:
    from imagekit.clusteraccept.run import (
        DEFAULT_STARTUP_S,
        AcceptOptions,
        required_for,
        startup_budget,
    )

    store = EvidenceStore(tmp_path)
    options = AcceptOptions(namespace="ns")
    budget, source, check = startup_budget(store, options, "m")   # nothing measured it
    assert (budget, source, check.status) == (DEFAULT_STARTUP_S, "default", Status.DEFERRED)
    assert "no observed start" in check.detail and "measured against nothing" in check.detail
    given = options.model_copy(update={"startup_seconds": 30})
    _, _, check = startup_budget(store, given, "m")
    assert check.status is Status.DEFERRED and "no observed start" in check.detail
    _startup_evidence(store, 40.0, "other-model")
    _startup_evidence(store, 48.0, "m")
    budget, source, check = startup_budget(store, options, "m")
    assert budget == required_for(48.0) == 120 and source.startswith("observed 48.0 s")
    short = options.model_copy(update={"startup_seconds": 30})
    budget, _, check = startup_budget(store, short, "m")
    assert check.status is Status.FAIL and "shorter than the last observed start" in \
        check.detail and "not submitted" in check.detail
    _, _, check = startup_budget(store, short.model_copy(update={"startup_seconds": 120}), "m")
    assert check.status is Status.PASS and "covers the last observed start" in check.detail


def test_a_budget_nothing_measured_is_judged_by_the_runs_own_start_or_stays_deferred(
        tmp_path: Path) -> None:
    """The default budget on an empty store: this run's ready start judges it (PASS when it
    covers the start with margin, FAIL when not); no measured start leaves it DEFERRED, saying
    why; a budget judged from evidence is not judged again."""
    from imagekit.clusteraccept.run import AcceptOptions, budget_after_start, startup_budget

    _, _, unmeasured = startup_budget(EvidenceStore(tmp_path), AcceptOptions(namespace="ns"),
                                      "m")
    ok = budget_after_start(unmeasured, 900, 44.7)
    assert ok.status is Status.PASS and "covers this run's own start: 44.7 s" in ok.detail
    assert ok.data["observed_by"] == "this run" and ok.data["required_seconds"] == 116
    thin = budget_after_start(unmeasured, 900, 800.0)
    assert thin.status is Status.FAIL and "shorter than this run's own start" in thin.detail
    never = budget_after_start(unmeasured, 900, None, "the engine never became ready here")
    assert never.status is Status.DEFERRED
    assert never.detail.endswith("the engine never became ready here, so no start measured it "
                                 "either")
    failed = CheckResult(name="startup_budget", status=Status.FAIL, detail="short")
    assert budget_after_start(failed, 30, 44.7) is failed


def _pod_attempt(tmp_path: Path) -> Path:
    from imagekit.evidence.kinds import AcceptResult
    from imagekit.results import CheckResult

    pod_store = EvidenceStore(tmp_path / "pod")
    with pod_store.attempt(DIGEST, "accept-functional", suite="functional") as attempt:
        attempt.write_result(AcceptResult(kind="accept-functional", suite="functional"))
        attempt.write_text("exchanges/001-x.json", "{}")
        attempt.add_check(CheckResult(name="streaming", status=Status.DEFERRED, detail="x"))
    return tmp_path / "pod"


def _controller_log(store_root: Path, capsys) -> str:
    """What the controller Pod prints: accept_suites.emit (the in-Pod side of the protocol)
    and controller.report, run here from the packaged controller scripts as the Pod runs them."""
    import importlib.util

    from imagekit.cluster.manifests import manifests_dir

    modules = {}
    for name in ("accept_suites", "controller"):
        spec = importlib.util.spec_from_file_location(
            f"_pod_{name}", manifests_dir() / "controller" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules[name] = module
    capsys.readouterr()
    print("controller: engine ready")
    assert modules["accept_suites"].emit(store_root) == 1
    modules["controller"].report("accept_suites.py", "PASS", "ok", returncode=0)
    return capsys.readouterr().out


def test_controller_attempts_are_filed_under_the_digest(tmp_path: Path, capsys) -> None:
    from imagekit.clusteraccept.protocol import ResultLine, parse_log
    from imagekit.clusteraccept.run import _controller_check, _refile
    from imagekit.evidence.kinds import AcceptResult
    from imagekit.oci import Digest

    log = _controller_log(_pod_attempt(tmp_path), capsys)
    said = parse_log(log)
    assert len(said.attempts) == 1 and said.results[0].status == "PASS"
    assert said.results[0].model_extra == {"returncode": 0} and said.harness_error is None
    store = EvidenceStore(tmp_path / "real")
    assert _refile(store, Digest.parse(DIGEST), "r:t", said.attempts[0], "ctl") == \
        "accept-functional"
    [filed] = store.attempts(DIGEST, "accept-functional")
    assert isinstance(store.result(filed), AcceptResult)
    assert filed.context["from_controller_pod"] == "ctl" and filed.checks[0].name == "streaming"
    assert (store.path_of(filed) / "exchanges" / "001-x.json").read_text() == "{}"
    ok = _controller_check({"status": {"phase": "Succeeded"}}, said.results, None, ["x"])
    assert ok.status is Status.PASS
    broken = _controller_check({"status": {"phase": "Failed"}}, [ResultLine(
        phase="controller", status="ERROR",
        detail="cannot start accept_suites.py: No such file or directory")], None, [])
    assert broken.status is Status.ERROR and "not a model failure" in broken.detail


def test_the_attempt_line_contract_round_trips(tmp_path: Path) -> None:
    from imagekit.clusteraccept.protocol import (
        AttemptLine,
        HarnessErrorLine,
        ResultLine,
        parse_line,
    )
    from imagekit.evidence.store import AttemptRecord

    record_path = next(_pod_attempt(tmp_path).rglob("attempt.json"))
    record = AttemptRecord.model_validate_json(record_path.read_text())
    line = AttemptLine(attempt=record, files={"a.txt": base64.b64encode(b"hi").decode()})
    text = line.to_line()
    assert text.startswith("IMAGEKIT-ATTEMPT {") and "\n" not in text
    assert json.loads(text.removeprefix("IMAGEKIT-ATTEMPT "))["v"] == 1
    back = parse_line(text)
    assert back == line and isinstance(back, AttemptLine)
    assert back.file_bytes() == {"a.txt": b"hi"}
    for other in (ResultLine(phase="p", status="PASS", detail="d"),
                  HarnessErrorLine(error="boom")):
        assert parse_line(other.to_line()) == other
    assert parse_line("controller: prose is not protocol") is None


@pytest.mark.parametrize(("line", "says"), [
    ('IMAGEKIT-RESULT {"v": 2, "phase": "p", "status": "PASS"}',
     "protocol version 2; this imagekit reads version 1 only"),
    ('IMAGEKIT-RESULT {"phase": "p", "status": "PASS"}',
     "protocol version None; this imagekit reads version 1 only"),
    ("IMAGEKIT-ATTEMPT {not json", "IMAGEKIT-ATTEMPT line is not JSON"),
    ('IMAGEKIT-ATTEMPT ["a"]', "IMAGEKIT-ATTEMPT line is not a JSON object"),
    ('IMAGEKIT-ATTEMPT {"v": 1, "files": {}}',
     "IMAGEKIT-ATTEMPT line does not match the contract: attempt: Field required"),
    ('IMAGEKIT-HARNESS-ERROR {"v": 1, "error": "x", "guess": 1}',
     "does not match the contract: guess: Extra inputs are not permitted"),
])
def test_a_wrong_version_or_a_malformed_line_is_refused(line: str, says: str) -> None:
    """The cases that make the contract FAIL: never guessed at, never skipped."""
    from imagekit.clusteraccept.protocol import ProtocolError, parse_log

    with pytest.raises(ProtocolError) as caught:
        parse_log("controller: engine ready\n" + line + "\n")
    assert says in caught.value.message
    assert caught.value.where == "controller log line 2"


def test_engine_pod_for_the_cpu_platform(tmp_path: Path) -> None:
    from imagekit.clusteraccept.run import CPU_ENGINE_ARGS, CPU_ENGINE_ENV, AcceptOptions, render
    from imagekit.oci import ImageReference

    options = AcceptOptions(namespace="ns", model_claim="model", engine_env=CPU_ENGINE_ENV,
                            engine_args=[*CPU_ENGINE_ARGS, "--no-such-flag"],
                            served_model_name="imagekit-standin/llama-text-32k")
    pod, cm = render(options, ImageReference.parse(IMAGE), "run1", 120, [])
    container = pod["spec"]["containers"][0]
    assert "resources" not in container                  # no GPU asked on the CPU platform
    assert container["args"] == ["--dtype", "float32", "--enforce-eager", "--no-such-flag"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["ENGINE"] == "vllm"
    assert pod["metadata"]["labels"]["imagekit.dev/accept-run"] == "run1"
    assert pod["metadata"]["labels"]["imagekit.dev/role"] == "engine-server"
    assert container["startupProbe"]["failureThreshold"] * \
        container["startupProbe"]["periodSeconds"] >= 120
    assert pod["spec"]["volumes"][-1]["persistentVolumeClaim"] == {"claimName": "model",
                                                                   "readOnly": True}
    with pytest.raises(Exception, match="may not override"):
        render(options.model_copy(update={"engine_env": {"TP": "2"}}),
               ImageReference.parse(IMAGE), "run1", 120, [])


def test_the_gate_refuses_an_image_without_image_phase_evidence(tmp_path: Path) -> None:
    from imagekit.errors import CheckFailed
    from imagekit.report.gate import image_phase_gate

    with pytest.raises(CheckFailed, match="no image-phase evidence"):
        image_phase_gate(EvidenceStore(tmp_path), DIGEST)


def test_the_rehearsal_step_counts_judged_semantic_verdicts() -> None:
    from imagekit.clusteraccept.rehearsal import standin_acceptance_check

    def aspect(protocol: str, semantic: str) -> dict:
        return {"protocol": {"status": protocol}, "semantic": {"status": semantic}}

    good = {"checks": [
        {"name": "engine_start", "status": "PASS", "detail": "", "data": {}},
        {"name": "streaming", "status": "PASS", "detail": "streamed '1 2 3'",
         "data": aspect("PASS", "PASS")},
        {"name": "multi-turn", "status": "PASS", "detail": "answered 'BLUE-HERON-42'",
         "data": aspect("PASS", "PASS")},
        {"name": "round-01-text-c1-in64-out8", "status": "PASS", "detail": "", "data": {}},
        {"name": "controller", "status": "PASS", "detail": "", "data": {}}]}
    check = standin_acceptance_check("vllm-cluster-accept", good)
    assert check.status is Status.PASS and "semantic 2 PASS, 0 FAIL" in check.detail
    assert check.data["semantic_pass"] == 2 and check.data["semantic_fail"] == 0
    wrong = json.loads(json.dumps(good))
    wrong["checks"][2].update(status="FAIL", detail="semantic FAIL: answered 'OK'",
                              data=aspect("PASS", "FAIL"))
    failed = standin_acceptance_check("x", wrong)
    assert failed.status is Status.FAIL and "semantic 1 PASS, 1 FAIL" in failed.detail
    assert "multi-turn: semantic FAIL" in failed.detail
    # random weights: nothing judged, which the rehearsal no longer takes for a pass
    random = json.loads(json.dumps(good))
    for n in (1, 2):
        random["checks"][n].update(status="DEFERRED", detail="stand-in model: answers are "
                                   "not judged", data=aspect("PASS", "DEFERRED"))
    unjudged = standin_acceptance_check("x", random)
    assert unjudged.status is Status.FAIL and "semantic 0 PASS, 0 FAIL" in unjudged.detail
    assert "no semantic verdict was judged" in unjudged.detail
    broken = json.loads(json.dumps(good))
    broken["checks"][0]["status"] = "FAIL"
    assert "engine_start: FAIL" in standin_acceptance_check("x", broken).detail
    assert standin_acceptance_check("x", None).status is Status.ERROR



def test_the_rehearsal_step_accounts_for_every_check() -> None:
    """Zero load rounds is a FAIL, not a PASS; a DEFERRED whose reason is not the stand-in's is
    named in the detail (and listed in data.accounted with every other check), never skipped."""
    from imagekit.clusteraccept.rehearsal import standin_acceptance_check

    base = [
        {"name": "engine_start", "status": "PASS", "detail": "", "data": {}},
        {"name": "streaming", "status": "PASS", "detail": "streamed '1 2 3'",
         "data": {"protocol": {"status": "PASS"}, "semantic": {"status": "PASS"}}},
        {"name": "controller", "status": "PASS", "detail": "", "data": {}}]
    no_rounds = standin_acceptance_check("x", {"checks": base})
    assert no_rounds.status is Status.FAIL and "no load round ran" in no_rounds.detail
    video = {"name": "video-colour-order", "status": "DEFERRED",
             "detail": "not served by this model: needs video: the server does not list it",
             "data": {}}
    rnd = {"name": "round-01-text-c1-in64-out8", "status": "PASS", "detail": "", "data": {}}
    allowed = {"video-colour-order": Acceptance(status=Status.DEFERRED,
                                                reason="the model is text-only")}
    named = standin_acceptance_check("x", {"checks": [*base, video, rnd]}, allowed, "local")
    assert named.status is Status.PASS
    assert "named: video-colour-order (DEFERRED: not served by this model" in named.detail
    assert "allowed by profile local: the model is text-only" in named.detail
    assert set(named.data["accounted"]) == {c["name"] for c in [*base, video, rnd]}
    assert named.data["accounted"]["video-colour-order"].startswith("named: DEFERRED, allowed")
    # the same run, the profile allowing nothing: DEFERRED, never PASS, the check named
    unallowed = standin_acceptance_check("x", {"checks": [*base, video, rnd]}, {}, "local")
    assert unallowed.status is Status.DEFERRED
    assert "video-colour-order (DEFERRED: not served by this model" in unallowed.detail
    assert "not allowed by profile local" in unallowed.detail
    deferred_round = dict(rnd, status="DEFERRED", detail="left out of the formal load")
    bad = standin_acceptance_check("x", {"checks": [*base, deferred_round]})
    assert bad.status is Status.FAIL and "round-01-text-c1-in64-out8: DEFERRED" in bad.detail


def test_the_rehearsal_step_does_not_pass_a_needle_cut_by_the_context_unless_allowed() -> None:
    """A deployment whose served context is below the needle's document: the needle is
    DEFERRED as a context limit (nothing answered wrong). One other semantic PASS does not make
    the step PASS: it is DEFERRED, naming the needle and why; FAIL when something also
    answered wrong; PASS only when the profile allows that DEFERRED, with its reason."""
    from imagekit.acceptance.needle_retest import context_limit
    from imagekit.clusteraccept.rehearsal import standin_acceptance_check

    class Ctx:   # what context_limit reads of a suite context
        capabilities = type("Caps", (), {"max_model_len": 1024})()
        options = type("Opts", (), {"cases": type("Cases", (), {
            "name": "stand-in", "needle": type("Needle", (), {"min_tokens": 1200})()})()})()

    needle = context_limit(Ctx(), "original", 900).model_dump(mode="json")  # type: ignore[arg-type]
    assert needle["status"] == "DEFERRED" and "context limit" in needle["detail"]
    checks = [
        {"name": "engine_start", "status": "PASS", "detail": "", "data": {}},
        {"name": "streaming", "status": "PASS", "detail": "streamed '1 2 3'",
         "data": {"protocol": {"status": "PASS"}, "semantic": {"status": "PASS"}}},
        needle,
        {"name": "round-01-text-c1-in64-out8", "status": "PASS", "detail": "", "data": {}},
        {"name": "controller", "status": "PASS", "detail": "", "data": {}}]
    cut = standin_acceptance_check("x", {"checks": checks}, {}, "local")
    assert cut.status is Status.DEFERRED, cut.detail
    assert "needle-original (DEFERRED: context limit: the served context (1024 tokens)" in \
        cut.detail
    assert "not allowed by profile local" in cut.detail
    assert cut.data["unallowed_deferred"][0].startswith("needle-original")
    wrong = [*checks[:1], dict(checks[1], status="FAIL", data={
        "protocol": {"status": "PASS"}, "semantic": {"status": "FAIL"}}), *checks[2:]]
    both = standin_acceptance_check("x", {"checks": wrong}, {}, "local")
    assert both.status is Status.FAIL
    assert "streaming: semantic FAIL" in both.detail and "needle-original" in both.detail
    leave = {"needle-original": Acceptance(status=Status.DEFERRED,
                                           reason="this deployment serves 1024 tokens")}
    allowed = standin_acceptance_check("x", {"checks": checks}, leave, "local")
    assert allowed.status is Status.PASS, allowed.detail
    assert "allowed by profile local: this deployment serves 1024 tokens" in allowed.detail


def test_the_shipped_local_profile_allows_what_the_stand_in_lacks_and_no_more(
        tmp_path: Path) -> None:
    """The `local` profile lets the stand-in's missing capabilities stay DEFERRED, never a
    needle, a semantic verdict or the startup budget; a cluster-accept key
    accepts DEFERRED only, and a mistyped probe key is still refused."""
    from imagekit.errors import SpecError
    from imagekit.spec import load_spec

    spec = load_spec(packaged.path("dockerfiles", "images.toml"))
    allowed = spec.profiles["local"].cluster_accept_allowances("vllm")
    assert set(allowed) == {"tool-calling", "image-solid-colour", "image-bordered",
                            "image-chart", "video-colour-order"}
    assert all(a.status is Status.DEFERRED for a in allowed.values())
    assert spec.profiles["local"].cluster_accept_allowances("sglang") == {}
    assert spec.profiles["production"].cluster_accept_allowances("vllm") == {}
    text = packaged.path("dockerfiles", "images.toml").read_text()
    for n, (bad, why) in enumerate((
            ('"vllm.cluster-accept:streaming" = { status = "FAIL", reason = "wrong is fine" }',
             "DEFERRED only"),
            ('"nope.cluster-accept:streaming" = { status = "DEFERRED", reason = "no image" }',
             "is not '<image>.<probe>'"),
            ('"vllm.cli_hlep" = { status = "DEFERRED", reason = "a mistyped probe" }',
             "is not '<image>.<probe>'"))):
        spec_dir = tmp_path / str(n)
        spec_dir.mkdir()
        (spec_dir / "images.toml").write_text(text.replace(
            "[profiles.local.accept]\n", f"[profiles.local.accept]\n{bad}\n"))
        with pytest.raises(SpecError, match=re.escape(why)):
            load_spec(spec_dir / "images.toml")


def test_image_phase_gate_ignores_acceptance_but_not_a_failed_probe(tmp_path: Path) -> None:
    from imagekit.errors import CheckFailed
    from imagekit.report.gate import image_phase_gate
    from imagekit.results import CheckResult
    from tests.report.conftest import write_rehearsal

    store = EvidenceStore(tmp_path)
    r = write_rehearsal(store)
    with store.attempt(r.digest, "cluster-accept") as attempt:   # a failed start before
        attempt.add_check(CheckResult(name="engine_start", status=Status.FAIL, detail="crash"))
    assert image_phase_gate(store, r.digest).allowed
    with store.attempt(r.digest, "probe") as attempt:
        attempt.add_check(CheckResult(name="pip_check", status=Status.FAIL, detail="broken"))
    with pytest.raises(CheckFailed, match="pip_check FAIL"):
        image_phase_gate(store, r.digest)


def test_a_profile_may_require_cluster_accept_before_the_final_hop(tmp_path: Path) -> None:
    from imagekit.report import check_promotable
    from imagekit.spec.models import ImagesSpec
    from tests.report.conftest import write_rehearsal

    profile = {"lock": "l", "staging": "s:1", "production": "p:2", "target": "t:3",
               "final_hop_requires": ["cluster-accept"]}
    image = {"engine": "vllm", "dockerfile": "d", "repository": "imagekit/vllm",
             "probes": ["pip_check"], "base": {"local": "s:1/b:1"}}
    spec = ImagesSpec(version=1, default_profile="local", images={"vllm": image},
                      profiles={"local": profile})
    assert spec.final_hop_requirements("t:3") == ["cluster-accept"]
    assert spec.final_hop_requirements("p:2") == []
    store = EvidenceStore(tmp_path)
    r = write_rehearsal(store)
    decision = check_promotable(store, r.digest, ["probe", "images-verify", "cluster-accept"])
    assert not decision.allowed and "required check cluster-accept is missing" in \
        decision.reasons[0]


def test_the_rehearsal_replaces_the_accept_steps_exit_code_by_its_verdict() -> None:
    """`volume_step` and `accept_step` with a runner that answers like the real commands
    (model-volume exit 0, cluster accept exit 1 for the capabilities the model lacks, its JSON
    report) and records as the real StepRunner does: a step run `judged_after` gets no check
    of its own, the judge's verdict is the only one (nothing is added to be taken back)."""
    from imagekit.progress import NullProgress
    from imagekit.rehearsal import accept_step, volume_step
    from imagekit.results import CheckResult

    report = {"checks": [
        {"name": "engine_start", "status": "PASS", "detail": "", "data": {}},
        {"name": "streaming", "status": "PASS", "detail": "streamed '1 2 3'",
         "data": {"protocol": {"status": "PASS"}, "semantic": {"status": "PASS"}}},
        {"name": "tool-calling", "status": "DEFERRED", "detail": "not served by this model: "
         "needs tools", "data": {"protocol": None, "semantic": None}},
        {"name": "round-01-text-c1-in64-out8", "status": "PASS", "detail": "", "data": {}},
        {"name": "controller", "status": "PASS", "detail": "", "data": {}}]}

    class Runner:
        sink = NullProgress()

        def __init__(self) -> None:
            self.checks: list[CheckResult] = []
            self.calls: list[tuple] = []
            self.stores: list[Path | None] = []
            self.argv: list[tuple[str, ...]] = []

        def add_check(self, check) -> None:
            self.checks.append(check)

        def run(self, name, *args, want_json=False, judged_after=False, store=None):
            self.calls.append((*args[:2], judged_after))
            self.stores.append(store)
            self.argv.append(args)
            code = 0 if args[1] == "model-volume" else 1
            if not judged_after:
                self.add_check(CheckResult(name=name, status=Status.PASS if code == 0
                                           else Status.FAIL, detail=f"exit {code}"))
            return code, report if want_json else None

    runner = Runner()
    actors = Path("/r/actors")
    from imagekit.spec import load_spec

    local = load_spec(packaged.path("dockerfiles", "images.toml")).profiles["local"]
    assert volume_step(runner, actors)  # type: ignore[arg-type]
    accept_step(runner, "vllm", "127.0.0.1:5003/imagekit/vllm:t", "local",  # type: ignore[arg-type]
                actors, allowed=local.cluster_accept_allowances("vllm"))
    # the accept step's exit 1 is judged here, so its live line must not say FAILED for it
    assert runner.calls == [("cluster", "model-volume", False), ("cluster", "accept", True)]
    # the operator's own (empty) store, CI's and the release engineer's keys trusted, its key
    assert runner.stores == [actors / "stores" / "operator"] * 2
    accept = " ".join(runner.argv[1])
    assert "--trust-key /r/actors/keys/ci.pub --trust-key /r/actors/keys/release.pub" in accept
    assert accept.endswith("--key /r/actors/keys/operator/imagekit.key")
    assert [(c.name, c.status) for c in runner.checks] == [
        ("model-volume", Status.PASS), ("vllm-cluster-accept", Status.PASS)]


def test_cluster_accept_takes_the_profiles_cases_and_refuses_a_bad_one_before_the_cluster(
        tmp_path: Path) -> None:
    """The profile names the cases (a shipped set or a file beside the spec); a missing or
    invalid one is one line, exit 2, before the gate or any cluster contact."""
    import shutil

    from typer.testing import CliRunner

    from imagekit import packaged
    from imagekit.cli import app
    from imagekit.spec import load_spec

    _, local = load_spec(packaged.path("dockerfiles", "images.toml")).profile("local")
    assert local.cases == "stand-in"
    spec_dir = tmp_path / "spec"
    shutil.copytree(packaged.path("dockerfiles"), spec_dir)
    spec = spec_dir / "images.toml"
    spec.write_text(spec.read_text().replace('cases = "stand-in"', 'cases = "mine.toml"'))
    argv = ["cluster", "accept", "127.0.0.1:9/x/y:t", "--profile", "local", "--spec", str(spec),
            "--namespace", "n"]
    missing = CliRunner().invoke(app, argv)
    assert missing.exit_code == 2
    assert f"cases file not found ({spec_dir / 'mine.toml'})" in missing.output
    text = packaged.path("manifests", "acceptance", "cases", "stand-in.toml").read_text()
    (spec_dir / "mine.toml").write_text(text.replace('expected = "12"', 'expected = "x"'))
    bad = CliRunner().invoke(app, argv)
    assert bad.exit_code == 2 and "cases file field arithmetic: expected 'x'" in bad.output
    spec.write_text(spec.read_text().replace('cases = "mine.toml"', 'cases = "nonesuch"'))
    unknown = CliRunner().invoke(app, argv)
    assert unknown.exit_code == 2
    assert "profiles.local.cases: cases 'nonesuch' is neither a shipped set" in unknown.output
