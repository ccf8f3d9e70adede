"""Pure checks of the cluster pieces: templates render pinned Pods, imageID comparison, the
Priority admission prediction, toleration matching, probe-log splitting (no cluster)."""

from __future__ import annotations

import json

import pytest

from imagekit.cluster import manifests
from imagekit.cluster.imageid import compare_image_id, image_id_digest
from imagekit.cluster.precheck import PodIntent, predict_priority_admission, tolerates
from imagekit.cluster.probe import parse_probe_log
from imagekit.errors import InvalidInput
from imagekit.launch.budget import ProbeBudget
from imagekit.oci import Digest
from imagekit.results import Status

D1 = "sha256:" + "1" * 64
D2 = "sha256:" + "2" * 64
CFG = "sha256:" + "c" * 64
IMAGE = f"127.0.0.1:5003/imagekit/sglang-fixed:1@{D1}"


def test_templates_refuse_a_tag_and_pin_the_digest() -> None:
    with pytest.raises(InvalidInput, match="pinned by digest"):
        manifests.render("probe-pod.yaml.j2", name="p", namespace="n",
                         image="127.0.0.1:5003/imagekit/sglang-fixed:1", node_name=None,
                         node_selector={}, tolerations=[], configmap="c",
                         deadline_seconds=60, memory_limit="1Gi")
    pod = manifests.render("probe-pod.yaml.j2", name="p", namespace="n", image=IMAGE,
                           node_name=None, node_selector={"a": "b"},
                           tolerations=[manifests.GPU_TOLERATION], pull_secrets=["s"],
                           configmap="c", deadline_seconds=60, memory_limit="1Gi")
    container = pod["spec"]["containers"][0]
    assert container["image"] == f"127.0.0.1:5003/imagekit/sglang-fixed@{D1}"
    assert "resources" in container and "nvidia.com/gpu" not in json.dumps(container["resources"])
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"} in container["env"]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "s"}]
    assert pod["spec"]["nodeSelector"] == {"a": "b"}


def test_template_values_cannot_inject_yaml() -> None:
    pod = manifests.render("probe-pod.yaml.j2", name="p\nkind: Secret", namespace="n",
                           image=IMAGE, node_name=None, node_selector={}, tolerations=[],
                           configmap="c", deadline_seconds=60, memory_limit="1Gi")
    assert pod["kind"] == "Pod" and pod["metadata"]["name"] == "p\nkind: Secret"


def test_gpu_preflight_and_engine_templates() -> None:
    pod = manifests.render("gpu-preflight-pod.yaml.j2", name="pf", namespace="n", image=IMAGE,
                           node_selector={"nvidia.com/gpu.present": "true"},
                           tolerations=[manifests.GPU_TOLERATION],
                           priority_class_name="batch-nonpreempting", preemption_policy=None,
                           command=["python3", "/imagekit/preflight.py"], gpus=8,
                           configmap="pf", deadline_seconds=900)
    spec = pod["spec"]
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert spec["priorityClassName"] == "batch-nonpreempting"
    assert "preemptionPolicy" not in spec
    budget = ProbeBudget.covering(2019)
    engine = manifests.render(
        "engine-server.yaml.j2", name="sglang", namespace="n", image=IMAGE, engine="sglang",
        node_selector={}, tolerations=[], priority_class_name=None,
        env=[{"name": "ENGINE", "value": "sglang"}, {"name": "EXECUTE", "value": "1"}],
        port=30000, gpus=8, startup=budget,
        health_command=["python3", "-c", "import urllib.request as u; "
                        "u.urlopen('http://127.0.0.1:30000/health', timeout=4)"],
        configmap="launch", deadline_seconds=86400, model_claim="m3-weights",
        model_mount="/models/model")
    container = engine["spec"]["containers"][0]
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 2019
    assert "exec" in startup and "exec" in container["readinessProbe"]
    assert engine["spec"]["volumes"][-1]["persistentVolumeClaim"]["readOnly"] is True


def test_controller_template_runs_controller_from_configmap() -> None:
    pod = manifests.render("controller-pod.yaml.j2", name="ctl", namespace="n", image=IMAGE,
                           node_selector={}, tolerations=[], env=[], configmap="ctl",
                           deadline_seconds=600)
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python3", "/opt/controller/controller.py"]
    source = (manifests.manifests_dir() / "controller" / "controller.py").read_text()
    assert "Path(__file__).absolute().parent" in source
    assert [v["name"] for v in pod["spec"]["volumes"]] == ["scripts", "scratch"]


def test_the_controller_mounts_the_model_volume_read_only_and_gets_the_cases() -> None:
    """With a model claim the controller sees the model read-only (it hashes the files the
    engine serves); the cases file travels in the scripts ConfigMap, named by $CASES."""
    from imagekit.acceptance.cases import load
    from imagekit.clusteraccept.run import AcceptOptions, controller_files

    pod = manifests.render("controller-pod.yaml.j2", name="ctl", namespace="n", image=IMAGE,
                           node_selector={}, tolerations=[], env=[], configmap="ctl",
                           deadline_seconds=600, model_claim="model",
                           model_mount="/models/model")
    volume = pod["spec"]["volumes"][-1]
    assert volume["persistentVolumeClaim"] == {"claimName": "model", "readOnly": True}
    mount = pod["spec"]["containers"][0]["volumeMounts"][-1]
    assert mount == {"name": "model", "mountPath": "/models/model", "readOnly": True}
    _, text = load("stand-in")
    files = controller_files(AcceptOptions(namespace="n", cases_text=text))
    assert files["cases.toml"] == text


def test_image_id_digest_part_only() -> None:
    assert image_id_digest(f"127.0.0.1:5002/other/repo@{D1}") == Digest.parse(D1)
    assert image_id_digest(f"docker-pullable://x/y@{D1}") == Digest.parse(D1)
    assert image_id_digest("sha256:" + "c" * 64) is None  # a config ID, not a reference


def _manifest(config: str, pad: str = "") -> bytes:
    body = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config,
                       "size": 10},
            "layers": []}
    return (json.dumps(body) + pad).encode()


def test_image_id_match_mismatch_and_deduplicated() -> None:
    pinned = Digest.parse(D1)
    ok = compare_image_id(pinned, f"127.0.0.1:5003/a@{D1}", lambda d: b"")
    assert ok.status is Status.PASS
    same_content = {Digest.parse(D1): _manifest(CFG), Digest.parse(D2): _manifest(CFG, " ")}
    dedup = compare_image_id(pinned, f"127.0.0.1:5003/a@{D2}", same_content.__getitem__)
    assert dedup.status is Status.PASS and "deduplicated" in dedup.detail
    other = {Digest.parse(D1): _manifest(CFG), Digest.parse(D2): _manifest("sha256:" + "e" * 64)}
    bad = compare_image_id(pinned, f"127.0.0.1:5003/a@{D2}", other.__getitem__)
    assert bad.status is Status.FAIL and "not the pinned" in bad.detail
    assert compare_image_id(pinned, "", lambda d: b"").status is Status.FAIL


def test_priority_admission_prediction_matches_v120_rules() -> None:
    never = {"metadata": {"name": "nonpreempting"}, "value": 1000, "preemptionPolicy": "Never"}
    refused, _, _ = predict_priority_admission(PodIntent(preemption_policy="Never"), [])
    assert refused.status is Status.FAIL and "403" in refused.detail
    assert "PreemptLowerPriority" in refused.detail and "no PriorityClass with " \
        "preemptionPolicy Never exists" in refused.detail
    hinted, _, _ = predict_priority_admission(PodIntent(preemption_policy="Never"), [never])
    assert hinted.status is Status.FAIL and "priorityClassName: nonpreempting" in hinted.detail
    ok, value, policy = predict_priority_admission(
        PodIntent(priority_class_name="nonpreempting", preemption_policy="Never"), [never])
    assert ok.status is Status.PASS and (value, policy) == (1000, "Never")
    missing, _, _ = predict_priority_admission(PodIntent(priority_class_name="nope"), [never])
    assert missing.status is Status.FAIL and "no PriorityClass with name nope" in missing.detail
    plain, value, _ = predict_priority_admission(PodIntent(), [])
    assert plain.status is Status.PASS and value == 0


def test_tolerations() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert tolerates([manifests.GPU_TOLERATION], taint)
    assert tolerates([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present"}], taint)
    assert not tolerates([{"key": "nvidia.com/gpu", "operator": "Equal", "value": "x"}], taint)
    assert not tolerates([{"key": "other", "operator": "Exists"}], taint)
    assert tolerates([{"operator": "Exists"}], taint)
    assert not tolerates([{"key": "nvidia.com/gpu", "operator": "Exists",
                           "effect": "NoExecute"}], taint)


def test_probe_log_split() -> None:
    log = "\n".join([
        "imagekit-probe-runner start x86_64",
        "==> imagekit-probe pip_check", "No broken requirements found.",
        "<== imagekit-probe pip_check rc=0",
        "==> imagekit-probe sm90", "torch arch list: []",
        '{"status": "FAIL", "detail": "sm_90 not in torch.cuda.get_arch_list() (CPU build)"}',
        "<== imagekit-probe sm90 rc=1",
        "==> imagekit-probe crashed", "Killed"])
    checks = {c.name: c for c in parse_probe_log(log)}
    assert checks["probe:pip_check"].status is Status.PASS
    assert checks["probe:sm90"].status is Status.FAIL and "sm_90" in checks["probe:sm90"].detail
    assert checks["probe:crashed"].status is Status.ERROR


def test_containerd_hosts_toml_has_top_level_settings_and_empty_host_table(tmp_path) -> None:
    import tomllib

    from imagekit.infra.cluster import registry_hosts_toml, write_registry_hosts
    from imagekit.infra.state import InfraState, RegistryEndpoint

    text = registry_hosts_toml("127.0.0.1:5003", "https", tmp_path / "ca.crt")
    doc = tomllib.loads(text)
    assert doc["server"] == "https://127.0.0.1:5003" and doc["ca"] == str(tmp_path / "ca.crt")
    assert doc["host"] == {}                    # present and empty (containerd 1.6.20 needs it)
    ca = tmp_path / "ca.pem"
    ca.write_text("CA")
    state = InfraState(
        state_dir=tmp_path, docker_config_dir=tmp_path, ca_file=ca,
        registries={"staging": RegistryEndpoint(name="staging", address="127.0.0.1:5001",
                                                scheme="http", auth="none"),
                    "target": RegistryEndpoint(name="target", address="127.0.0.1:5003",
                                               scheme="https", auth="bearer", ca_file=ca)})
    joined = write_registry_hosts(tmp_path / "certs.d", state)
    # the referrers-API registry is no mirror of the cluster: containerd's config (and its
    # fingerprint) stay what they were without it
    with_referrers = state.model_copy(update={"registries": {
        **state.registries, "referrers": RegistryEndpoint(
            name="referrers", address="127.0.0.1:5004", scheme="http", auth="none")}})
    assert write_registry_hosts(tmp_path / "certs.d", with_referrers) == joined
    assert not (tmp_path / "certs.d/127.0.0.1:5004").exists()
    staging = tomllib.loads((tmp_path / "certs.d/127.0.0.1:5001/hosts.toml").read_text())
    assert staging == {"server": "http://127.0.0.1:5001", "capabilities": ["pull", "resolve"],
                       "host": {}}
    target = tomllib.loads((tmp_path / "certs.d/127.0.0.1:5003/hosts.toml").read_text())
    assert (tmp_path / "certs.d/127.0.0.1:5003/ca.crt").read_text() == "CA"
    assert target["ca"] == str(tmp_path / "certs.d/127.0.0.1:5003/ca.crt")


def test_probe_files_mount_helpers_and_write_the_plan(tmp_path) -> None:
    from imagekit.cluster.probe import probe_files

    (tmp_path / "_common.py").write_text("X = 1\n")
    (tmp_path / "find_spec.py").write_text("import _common\n")
    files = probe_files(tmp_path, [("find_spec", ["nixl", "sglang"])])
    assert {"_common.py", "find_spec.py", "probe-runner.sh"} <= set(files)
    assert files["probe-plan.txt"] == "find_spec nixl sglang\n"
    assert "probe-plan.txt" not in probe_files(tmp_path)
    with pytest.raises(InvalidInput, match="no probe named nope"):
        probe_files(tmp_path, [("nope", [])])
    with pytest.raises(InvalidInput, match="spaces"):
        probe_files(tmp_path, [("find_spec", ["a b"])])


def test_controller_bundle_carries_controller_and_subscripts() -> None:
    pod, cm = manifests.controller_bundle("acc", "n", IMAGE, {"suite.py": "print('x')\n"},
                                          {"SUBSCRIPTS": "smoke.py,suite.py",
                                           "READY_URL": "http://127.0.0.1:30000/health"})
    assert {"controller.py", "smoke.py", "suite.py"} <= set(cm["data"])
    assert pod["spec"]["volumes"][0]["configMap"]["name"] == cm["metadata"]["name"]
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["SUBSCRIPTS"] == "smoke.py,suite.py"
