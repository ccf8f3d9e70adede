"""What each cluster command really sends to the local API server, recorded, held against
`permissions.USES` and against the Role `cluster rbac` prints: a command that starts sending
something new fails here, and so does a grant no command sends any more.

How each command is recorded (in this process, through the real transport with one more
request hook, `recording.py`; as the administrator, so that no refusal cuts a run short and
every request a command makes is seen; in a namespace made and labelled restricted by
`cluster rbac`'s own objects):

- `cluster probe`: the CLI, the test's python image, one probe that passes;
- `cluster precheck`: the CLI twice, with --pod-file (the namespace's Pod Security level is
  read), then with --model-claim of a bound model volume and --storage-driver;
- `cluster recreate`: the CLI twice on a busybox Pod (created; then deleted, waited for until
  gone and created again);
- `cluster gpu-preflight`: the CLI four times with --gpus 0 (no GPU on this node) and a stand-in
  script: a dry run; one Pod with --submit and --storage-driver; --each-node --submit (the
  stand-in prints no preflight record, so each node's row is an ERROR of the Pod); --nodes 1
  --submit (the job's Pod fails without torch, so the rank that does not join is looked up in
  the headless Service's endpoints). Marking a failed node (--cordon-failed/--taint-failed)
  would cordon the node every other test uses: test_rbac_use_unit.py records it against a
  fake API server, and it is added here;
- and to every command, the `get` of each kind it creates (`permissions.read_back`): a create
  sent again over a connection closed under it reads the object back when it answers 409,
  which a healthy cluster never makes happen; test_rbac_use_unit.py records it against a fake
  API server that drops the connection;
- `cluster accept`: its flow (`run_accept`, what the CLI calls after its image-phase gate,
  which reads no cluster) with the python image as engine and controller, --model-claim of the
  model volume and a forced launch: the engine fails to start, so the run is a failed start
  (precheck, submission, the start watched, logs and events read, cleanup); a run whose engine
  starts reads the controller's log with the same `get pods/log`;
- `cluster model-volume`: the CLI, making the volume (with --label-node on the node's own
  value, so the node is unchanged) and deleting it.

`cluster rbac` prints and `doctor` asks only; neither is recorded.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.cluster import permissions
from imagekit.cluster.permissions import OPEN_TO_EVERY_USER, USES, Use, read_back, uses

from .helpers import NODE, busybox_pod
from .operator import grant
from .recording import compare, recording, role_grants

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

PROBE_OK = 'import json\nprint(json.dumps({"status": "PASS", "detail": "python runs"}))\n'
GPU_NODES = ["--selector", "nvidia.com/gpu.present=true"]
#: what the marking of a failed node sends (recorded in test_rbac_use_unit.py)
MARKING = uses("get,patch", "nodes", "cluster")
#: the non-resource requests every command may send: discovery, open to every user
DISCOVERY = ("/api", "/apis", "/version")


def _cli(*args: str, env: dict[str, str]) -> None:
    from imagekit.cli.app import app

    done = CliRunner().invoke(app, list(args), env=env)
    # exit 1 is a finding (a dry run's DEFERRED submission, a failed preflight): the requests
    # were sent all the same; exit 2 would be a refusal before the run
    assert done.exit_code in (0, 1) or "--each-node" in args, (args, done.output[-2000:])
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception


def _accept(kube_path: Path, image, namespace: str, claim: str, tmp: Path,
            docker_config: Path) -> None:
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.manifests import GPU_TOLERATION
    from imagekit.clusteraccept.run import (
        CPU_ENGINE_ARGS,
        CPU_ENGINE_ENV,
        AcceptOptions,
        run_accept,
    )
    from imagekit.evidence import EvidenceStore

    pinned = image.reference.with_digest(image.digest)
    options = AcceptOptions(namespace=namespace, model_claim=claim, engine_env=CPU_ENGINE_ENV,
                            engine_args=list(CPU_ENGINE_ARGS),
                            node_selector={"nvidia.com/gpu.present": "true"},
                            tolerations=[GPU_TOLERATION], docker_config_dir=docker_config,
                            timeout_s=120, force_launch="the test image has no engine")
    with Kube(kube_path) as kube:
        report = run_accept(kube, image.reference, image.digest, options,
                            EvidenceStore(tmp / "accept"), controller_image=lambda: pinned)
    assert {c.name: c.status.value for c in report.checks}["engine_start"] == "FAIL"


@pytest.fixture(scope="module")
def recorded(kube, cluster_state, python_image, tmp_path_factory):
    """(namespace, {command: the uses it sent}, the non-resource paths any of them sent)."""
    tmp = tmp_path_factory.mktemp("rbac-use")
    namespace = f"ik-rbac-{secrets.token_hex(3)}"
    grant(kube, namespace)
    admin = str(cluster_state.kubeconfig)
    env = {"DOCKER_CONFIG": str(cluster_state.docker_config_dir),
           "IMAGEKIT_EVIDENCE_DIR": str(tmp / "evidence")}
    on = ["--namespace", namespace, "--kubeconfig", admin]
    image = str(python_image.reference)
    probes = tmp / "probes"
    probes.mkdir()
    (probes / "python_runs.py").write_text(PROBE_OK)
    standin = tmp / "preflight_standin.py"
    standin.write_text("print('PREFLIGHT_STANDIN_OK')\n")
    pod = busybox_pod("rbac-recreate", namespace, terminationGracePeriodSeconds=1)
    pod_file = tmp / "pod.json"
    pod_file.write_text(json.dumps(pod))
    model = tmp / "model"
    model.mkdir()
    volume, claim = f"{namespace}-model", "model"
    preflight = ["cluster", "gpu-preflight", image, *on, *GPU_NODES, "--script", str(standin),
                 "--json"]
    sent: dict[str, set[Use]] = {}
    paths: set[str] = set()

    def record(command: str, *runs: tuple[str, ...]) -> None:
        with recording() as recorder:
            for args in runs:
                _cli(*args, env=env)
        sent[command] = sent.get(command, set()) | recorder.uses(namespace)
        paths.update(recorder.non_resource_paths())

    try:
        record("model-volume", ("cluster", "model-volume", "--path", str(model), "--volume",
                                volume, "--model-claim", claim, "--label-node", NODE, *on))
        record("probe", ("cluster", "probe", image, "--probes-dir", str(probes), *on, "--json"))
        record("precheck",
               ("cluster", "precheck", "--pod-file", str(pod_file), "--kubeconfig", admin,
                "--json"),
               ("cluster", "precheck", *on, *GPU_NODES, "--gpus", "0", "--model-claim", claim,
                "--storage-driver", "model.csi.invalid", "--json"))
        record("recreate", ("cluster", "recreate", str(pod_file), "--kubeconfig", admin),
               ("cluster", "recreate", str(pod_file), "--kubeconfig", admin))
        record("gpu-preflight", (*preflight, "--gpus", "0"),
               (*preflight, "--gpus", "0", "--storage-driver", "model.csi.invalid",
                "--submit"),
               (*preflight, "--gpus", "0", "--each-node", "--submit"),
               (*preflight, "--nodes", "1", "--gpus-per-node", "0", "--pod-timeout", "60",
                "--submit"))
        with recording() as recorder:
            _accept(cluster_state.kubeconfig, python_image, namespace, claim, tmp,
                    cluster_state.docker_config_dir)
        sent["accept"] = recorder.uses(namespace)
        paths.update(recorder.non_resource_paths())
        record("model-volume", ("cluster", "model-volume", "--delete", "--volume", volume,
                                "--model-claim", claim, *on))
    finally:
        kube.resource("Pod").delete("rbac-recreate", namespace, grace_seconds=0)
        kube.call("DELETE", f"/api/v1/namespaces/{namespace}")
        for kind in ("ClusterRoleBinding", "ClusterRole"):
            kube.resource(kind, "rbac.authorization.k8s.io/v1").delete(
                f"imagekit-read-{namespace}-imagekit")
        volumes = kube.resource("PersistentVolume")
        if volumes.exists(volume):
            volumes.delete(volume)
    sent["gpu-preflight"] |= MARKING
    return namespace, {c: (u | read_back(frozenset(u))) - OPEN_TO_EVERY_USER
                       for c, u in sent.items()}, paths


def waits_over_at_their_list(declared: frozenset[Use], sent: frozenset[Use]) -> set[Use]:
    """A wait lists first and opens its watch only when the list does not show the state yet:
    a volume already gone when its deletion is awaited sends no watch in that run. Such a
    `watch`, declared beside a `list` of the same resource that was sent, may go unsent."""
    return {u for u in declared - sent
            if u.verb == "watch" and u.model_copy(update={"verb": "list"}) in sent}


def test_a_wait_over_at_its_list_excuses_only_its_own_watch() -> None:
    declared = uses("list,watch", "persistentvolumes", "cluster") | uses("watch", "pods")
    sent = uses("list", "persistentvolumes", "cluster")
    assert waits_over_at_their_list(declared, sent) == set(
        uses("watch", "persistentvolumes", "cluster"))   # `watch pods`: no list, not excused


@pytest.mark.parametrize("command", [*permissions.COMMANDS, *permissions.ADMIN_COMMANDS])
def test_each_command_sends_exactly_its_declared_uses(recorded, command) -> None:
    _, sent, _ = recorded
    expected = USES[command] - waits_over_at_their_list(USES[command], sent[command])
    assert sorted(map(str, sent[command])) == sorted(map(str, expected))


def test_the_role_grants_exactly_what_the_commands_send(recorded) -> None:
    namespace, sent, _ = recorded
    operator = {c: sent[c] for c in permissions.COMMANDS}
    assert compare(operator, role_grants(permissions.rbac_objects(namespace))) == []
    for command in permissions.COMMANDS:   # and each command's own Role (`--command`)
        assert compare({command: sent[command]}, role_grants(permissions.rbac_objects(
            namespace, commands=(command,)))) == [], command


def test_beside_resources_only_discovery_is_sent(recorded) -> None:
    _, _, paths = recorded
    assert paths and all(any(p == root or p.startswith(root + "/") for root in DISCOVERY)
                         for p in paths), paths
