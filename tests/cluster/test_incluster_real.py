"""In-cluster credentials on the real API server: a ServiceAccount's token, never the admin's.

- From the host: the token, CA and namespace of a ServiceAccount's token Secret (what the
  kubelet mounts in a Pod) written to a folder, `KUBERNETES_SERVICE_*` pointing at the API
  server, no kubeconfig, no `$KUBECONFIG`, no infra state: `imagekit cluster recreate` is
  refused before anything is created (the access reviews answer for the ServiceAccount, named
  in the line) until `cluster rbac`'s Role is bound, and runs once it is; an
  unreadable or empty token is one line, exit 2, and nothing is created.
- Inside a Pod: imagekit installed from its wheel into an image of its own, run in a Pod of
  the local cluster with only its ServiceAccount mounted: `imagekit cluster probe` of a
  staging digest PASS.

The Pod uses the host's network (`hostNetwork: true`, in this test's own namespace): the local
API server advertises 127.0.0.1, and a loopback address cannot be an Endpoints address, so the
`kubernetes` Service (10.96.0.1) has no endpoints here and a Pod on the Pod network could reach
neither the API server nor the loopback registries. The Pod's `KUBERNETES_SERVICE_HOST` and
`_PORT` are set to the API server's own address, as the kubelet sets them to the Service's on a
cluster whose API server is reachable from Pods.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "imagekit-runner"
PROBE_OK = 'import sys, json\nprint("python", sys.version.split()[0])\n' \
           'print(json.dumps({"status": "PASS", "detail": "python runs in the image"}))\n'


def _grant_probe_rbac(kube, namespace: str, account: str) -> list[dict]:
    """What `imagekit cluster rbac --command probe` prints for `account` (the namespace is the
    test's own, so its object is left out), applied by the administrator. Returns the
    cluster-scoped objects (the caller deletes them; the namespace's go with it)."""
    from .operator import grant

    documents = grant(kube, namespace, "--service-account", account, "--command", "probe",
                      "--no-namespace-object")
    return [d for d in documents if d["kind"].startswith("Cluster")]


def _account_token_secret(kube, namespace: str, account: str) -> dict:
    """The token Secret the token controller makes for a new ServiceAccount (v1.20): the token,
    ca.crt and namespace a Pod of that account gets mounted."""
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount",
                 "metadata": {"name": account, "namespace": namespace}})
    deadline = time.monotonic() + 60
    secrets_ = kube.resource("Secret")
    while time.monotonic() < deadline:
        for item in secrets_.list(namespace):
            if item.get("type") == "kubernetes.io/service-account-token" and \
                    (item["metadata"].get("annotations") or {}).get(
                        "kubernetes.io/service-account.name") == account and \
                    item.get("data", {}).get("token"):
                return item
        time.sleep(0.5)
    raise AssertionError(f"no token Secret for ServiceAccount {account} within 60 s")


@pytest.fixture
def account_ns(kube):
    """A namespace of this test with the ServiceAccount; cluster-scoped grants deleted after."""
    from imagekit.cluster.probe import ensure_namespace

    name = f"ik-incluster-{secrets.token_hex(3)}"
    ensure_namespace(kube, name)
    cluster_scoped: list[dict] = []
    yield name, cluster_scoped
    for obj in cluster_scoped:
        kube.delete_object(obj)
    kube.call("DELETE", f"/api/v1/namespaces/{name}")


def _mounted(secret: dict, folder: Path) -> Path:
    """The Secret as the kubelet mounts it."""
    folder.mkdir(parents=True)
    for key in ("token", "ca.crt", "namespace"):
        (folder / key).write_bytes(base64.b64decode(secret["data"][key]))
    return folder


def _in_cluster_env(cluster_state, folder: Path, tmp_path: Path) -> dict[str, str]:
    """No --kubeconfig, no $KUBECONFIG, no ~/.kube/config, no infra state: only the Pod's
    variables and the mounted folder."""
    from imagekit.kube import kubeconfig

    server = kubeconfig.load(cluster_state.kubeconfig).cluster.server
    host, _, port = server.removeprefix("https://").rstrip("/").rpartition(":")
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    (tmp_path / "home").mkdir(exist_ok=True)
    return {**env, "HOME": str(tmp_path / "home"), "IMAGEKIT_STATE_DIR": str(tmp_path / "none"),
            "KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port,
            "IMAGEKIT_SERVICEACCOUNT_DIR": str(folder), "IMAGEKIT_PROGRESS": "plain"}


def _recreate(pod_file: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", "cluster", "recreate",
                           str(pod_file), "--json"], capture_output=True, text=True,
                          timeout=120, cwd=REPO, env=env)


def _pod_file(tmp_path: Path, namespace: str) -> Path:
    from .helpers import busybox_pod

    path = tmp_path / "pod.json"
    path.write_text(json.dumps(busybox_pod("incluster", namespace)))
    return path


def test_the_service_account_token_is_used_with_no_kubeconfig(
        kube, cluster_state, account_ns, tmp_path) -> None:
    namespace, cluster_scoped = account_ns
    folder = _mounted(_account_token_secret(kube, namespace, ACCOUNT), tmp_path / "sa")
    env = _in_cluster_env(cluster_state, folder, tmp_path)
    pod_file = _pod_file(tmp_path, namespace)

    refused = _recreate(pod_file, env)                  # no Role yet: the account, not admin
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"cluster recreate as system:serviceaccount:{namespace}:{ACCOUNT} may not " \
        "get namespaces, create pods" in refused.stderr, refused.stderr
    assert f"cluster rbac --namespace {namespace} --service-account {ACCOUNT} |" in \
        refused.stderr

    cluster_scoped += _grant_probe_rbac(kube, namespace, ACCOUNT)
    done = _recreate(pod_file, env)
    assert done.returncode == 0, done.stdout + done.stderr
    created = kube.get_pod(namespace, "incluster")
    assert created is not None and created["metadata"]["uid"] == json.loads(done.stdout)["uid"]


@pytest.mark.parametrize(("case", "line"), [
    ("unreadable", "imagekit: error: in-cluster ServiceAccount: cannot read the token file: "
                   "Is a directory"),
    ("empty", "imagekit: error: in-cluster ServiceAccount: the token file is empty"),
])
def test_an_unreadable_or_empty_token_is_one_line_and_nothing_is_created(
        kube, cluster_state, account_ns, tmp_path, case: str, line: str) -> None:
    namespace, cluster_scoped = account_ns
    folder = _mounted(_account_token_secret(kube, namespace, ACCOUNT), tmp_path / "sa")
    cluster_scoped += _grant_probe_rbac(kube, namespace, ACCOUNT)
    (folder / "token").unlink()
    if case == "unreadable":    # root reads any file: a token that is a folder is unreadable
        (folder / "token").mkdir()
    else:
        (folder / "token").write_text("")
    result = _recreate(_pod_file(tmp_path, namespace), _in_cluster_env(cluster_state, folder,
                                                                      tmp_path))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [f"{line} ({folder / 'token'})"]
    assert kube.resource("Pod").list(namespace) == []


# ------------------------------------------------------------------------ inside a Pod

RUNNER_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY wheels /tmp/wheels
RUN python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install --no-index --find-links /tmp/wheels --no-compile imagekit \\
 && rm -rf /tmp/wheels
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    PIP_DISABLE_PIP_VERSION_CHECK=1
"""


def _runner_image(registry: str, own: Path, tmp_path: Path) -> str:
    """imagekit's wheel `own` (the session's `built_wheel`) and its
    requirements (from the wheelhouse, `pip download`ed once) installed into a venv on the
    local bookworm base: no source tree in the image. Pushed to `registry`; the pinned
    reference."""
    from imagekit.engine import Engine
    from imagekit.oci import ImageReference
    from imagekit.standins.rootfs import ensure_rootfs_image
    from tests.build import wheel

    house = wheel.wheelhouse()
    for stale in house.glob("imagekit-*.whl"):   # pip would take a stale copy's requirements
        stale.unlink()
    fill = wheel.run([sys.executable, "-m", "pip", "download", "--dest", str(house), str(own)],
                     cwd=tmp_path, timeout=1200)
    assert fill.returncode == 0, fill.stderr[-2000:]
    for copied in house.glob("imagekit-*.whl"):
        copied.unlink()
    context = tmp_path / "context"
    (context / "wheels").mkdir(parents=True)
    for found in house.glob("*.whl"):
        if not found.name.startswith("imagekit-"):
            shutil.copy2(found, context / "wheels" / found.name)
    shutil.copy2(own, context / "wheels" / own.name)
    (context / "Dockerfile").write_text(RUNNER_DOCKERFILE)
    engine = Engine()
    log: list[str] = []
    base, _ = ensure_rootfs_image(engine, log)
    key = hashlib.sha256(own.read_bytes() + base.encode()).hexdigest()[:16]
    local = f"imagekit-local/incluster-runner:{key}"
    outcome = engine.build(context, tags=[local], build_args={"BASE_IMAGE": base})
    assert outcome.ok, outcome.log[-3000:]
    reference = ImageReference.parse(f"{registry}/imagekit-test/incluster-runner:{key}")
    engine.tag(local, str(reference))
    return str(reference.with_digest(engine.push(reference)))


def _state_for_pod(cluster_state) -> dict[str, str]:
    """infra's state file and CA, for the Pod's registry client (staging is plain HTTP): not
    its kubeconfig, which the Pod does not get."""
    state_file = cluster_state.state_dir / "state.json"
    return {"state.json": state_file.read_text(),
            "ca.crt": Path(cluster_state.ca_file).read_text()}


def test_cluster_probe_inside_a_pod_with_only_its_service_account(
        kube, cluster_state, push_to, account_ns, built_wheel, tmp_path) -> None:
    from imagekit.kube import kubeconfig
    from imagekit.kube.watch import wait_for

    namespace, cluster_scoped = account_ns
    _account_token_secret(kube, namespace, ACCOUNT)
    cluster_scoped += _grant_probe_rbac(kube, namespace, ACCOUNT)
    staging = cluster_state.registry("staging").address
    image = push_to("staging", "incluster-1")
    runner = _runner_image(staging, built_wheel[0], tmp_path)
    server = kubeconfig.load(cluster_state.kubeconfig).cluster.server
    host, _, port = server.removeprefix("https://").rstrip("/").rpartition(":")
    kube.create({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "runner-files", "namespace": namespace},
                 "data": {**_state_for_pod(cluster_state), "python_runs.py": PROBE_OK}})
    target = f"{image.reference.name}@{image.digest}"
    script = (
        'if [ -n "$KUBECONFIG" ] || [ -e "$HOME/.kube/config" ] || [ -e /state/k8s ]; then '
        'echo "a kubeconfig is present"; exit 3; fi; '
        'python3 -c "import imagekit; print(\'imagekit from\', imagekit.__file__)"; '
        f'imagekit cluster probe {target} --probes-dir /probes --namespace {namespace} '
        '--json > /tmp/report.json 2> /tmp/stderr; code=$?; '
        'echo "== report"; cat /tmp/report.json; echo "== stderr"; cat /tmp/stderr; '
        'exit $code')
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "incluster-runner", "namespace": namespace},
           "spec": {"serviceAccountName": ACCOUNT, "hostNetwork": True,
                    "restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{
                        "name": "imagekit", "image": runner, "command": ["sh", "-c", script],
                        "env": [{"name": "KUBERNETES_SERVICE_HOST", "value": host},
                                {"name": "KUBERNETES_SERVICE_PORT", "value": port},
                                {"name": "HOME", "value": "/tmp"},
                                {"name": "IMAGEKIT_STATE_DIR", "value": "/state"},
                                {"name": "IMAGEKIT_EVIDENCE_DIR", "value": "/tmp/evidence"},
                                {"name": "IMAGEKIT_PROGRESS", "value": "plain"}],
                        "volumeMounts": [{"name": "files", "mountPath": "/state"},
                                         {"name": "probes", "mountPath": "/probes"}]}],
                    "volumes": [
                        {"name": "files", "configMap": {"name": "runner-files", "items": [
                            {"key": "state.json", "path": "state.json"},
                            {"key": "ca.crt", "path": "tls/ca.crt"}]}},
                        {"name": "probes", "configMap": {"name": "runner-files", "items": [
                            {"key": "python_runs.py", "path": "python_runs.py"}]}}]}}
    kube.create(pod)
    ended = wait_for(kube.resource("Pod"), "incluster-runner", namespace,
                     lambda p: p if p and p.get("status", {}).get("phase") in
                     ("Succeeded", "Failed") else None, timeout=420, what="the runner Pod")
    log = kube.pod_logs(namespace, "incluster-runner")
    assert ended["status"]["phase"] == "Succeeded", log
    assert "/opt/venv/lib/python3" in log and "site-packages/imagekit" in log, log
    report = json.loads(log.split("== report\n", 1)[1].split("== stderr", 1)[0])
    checks = {c["name"]: c for c in report["checks"]}
    assert report["status"] == "PASS", log
    assert checks["image_id"]["status"] == "PASS"
    assert checks["image_id"]["data"]["image_id"].endswith("@" + str(image.digest))
    assert checks["probe:python_runs"]["status"] == "PASS", checks
    assert checks["cleanup"]["status"] == "PASS"
    left = [p["metadata"]["name"] for p in kube.resource("Pod").list(namespace)
            if p["metadata"]["name"].startswith("probe-")]
    pods = [kube.get_pod(namespace, name) for name in left]
    assert all(p is None or p["metadata"].get("deletionTimestamp") for p in pods), left
