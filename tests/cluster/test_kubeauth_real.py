"""Credentials that expire during a run, on the real cluster: `imagekit cluster probe` through
an authenticating front (kube_front.py: TLS on loopback, 401 for an expired token, the real
admin token upstream, watch and log bodies streamed through) with a kubeconfig whose exec
plugin (exec_plugin.py) mints tokens of a few seconds and counts its runs.

The measured failures: with 2-second tokens the probe failed after 3 s with "API 401:
Unauthorized" and left its Pod and ConfigMap behind; behind a front that closes the connection
after each streamed answer without `Connection: close` (a load balancer's idle timeout), it
failed with "watch failed: Server disconnected without sending a response" (a request sent on
a pooled connection the front had closed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .kube_front import KubeFront, exec_kubeconfig, plugin_runs, plugin_state

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
#: the probe sleeps, so the run outlives several tokens (and the log and watch streams, which
#: the front relays, span renewals)
PROBE_SLOW = ('import json, time\ntime.sleep({sleep})\n'
              'print(json.dumps({{"status": "PASS", "detail": "slept {sleep}s"}}))\n')


@pytest.fixture(scope="module")
def creds_ns(kube):
    """This file's own namespace (the cluster is shared by other test sessions), as the
    operator has it: enforce restricted, its ServiceAccount bound by `cluster rbac`."""
    import secrets

    from .operator import grant

    name = f"ik-creds-{secrets.token_hex(3)}"
    grant(kube, name)
    yield name
    kube.call("DELETE", f"/api/v1/namespaces/{name}")
    for kind in ("ClusterRoleBinding", "ClusterRole"):
        kube.resource(kind, "rbac.authorization.k8s.io/v1").delete(
            f"imagekit-read-{name}-imagekit")


@pytest.fixture(scope="module")
def upstream(kube, cluster_state, creds_ns, tmp_path_factory):
    """What the fronts forward as: the namespace's ServiceAccount, never the administrator."""
    from .operator import token_kubeconfig

    return token_kubeconfig(kube, cluster_state.kubeconfig, creds_ns, "imagekit",
                            tmp_path_factory.mktemp("operator") / "kubeconfig")


@pytest.fixture(scope="module")
def front(upstream, tmp_path_factory):
    server = KubeFront(upstream, tmp_path_factory.mktemp("kube-front"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def closing_front(upstream, tmp_path_factory):
    """The front in its load-balancer mode: connections kept alive, closed unannounced after
    each streamed answer (a request reusing one meanwhile is dropped unanswered)."""
    server = KubeFront(upstream, tmp_path_factory.mktemp("kube-front-lb"),
                       close_after_stream=True)
    yield server
    server.stop()


def _probe(image, namespace: str, kubeconfig: Path, tmp_path: Path, sleep: int
           ) -> subprocess.CompletedProcess[str]:
    probes = tmp_path / "probes"
    probes.mkdir()
    (probes / "slow.py").write_text(PROBE_SLOW.format(sleep=sleep))
    return subprocess.run(
        [sys.executable, "-m", "imagekit", "cluster", "probe", str(image.reference),
         "--probes-dir", str(probes), "--namespace", namespace, "--json",
         "--kubeconfig", str(kubeconfig), "--evidence-dir", str(tmp_path / "evidence")],
        capture_output=True, text=True, timeout=240, cwd=REPO,
        env={**os.environ, "IMAGEKIT_PROGRESS": "plain"})


def _objects_of_run(kube, namespace: str) -> list[str]:
    found = []
    for plural in ("pods", "configmaps", "secrets"):
        for item in kube.list(f"/api/v1/namespaces/{namespace}/{plural}"):
            if item["metadata"]["name"].startswith("probe-"):
                found.append(f"{plural}/{item['metadata']['name']}")
    return found


def test_cluster_probe_passes_through_tokens_of_three_seconds(
        front, kube, python_image, creds_ns, tmp_path) -> None:
    state = plugin_state(tmp_path / "plugin", front.key)
    config = exec_kubeconfig(tmp_path / "kubeconfig", front.url, front.cert, state, ttl=3)
    expired_before = front.expired
    result = _probe(python_image, creds_ns, config, tmp_path, sleep=8)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["probe:slow"]["status"] == "PASS"       # the followed log came through
    assert checks["image_id"]["status"] == "PASS"
    assert checks["cleanup"]["status"] == "PASS"
    runs = plugin_runs(state)
    assert len(runs) >= 3, runs          # a run of ~15 s on 3-s tokens: renewed, repeatedly
    assert all(r["spec"] == {"interactive": False} for r in runs)
    # renewed before expiry: the front never had to refuse one of this run's tokens
    assert front.expired == expired_before
    assert _objects_of_run(kube, creds_ns) == []


def test_a_token_the_plugin_cannot_renew_stops_the_run_and_cleanup_still_runs(
        front, kube, python_image, creds_ns, tmp_path) -> None:
    """The plugin's login expires after its first token (15 s): the run stops at the failed
    renewal, one line, exit 2; its deletes go out with the last good token (still valid for
    the renewal margin, 1.5 s here) and nothing of the run is left."""
    state = plugin_state(tmp_path / "plugin", front.key)
    config = exec_kubeconfig(tmp_path / "kubeconfig", front.url, front.cert, state, ttl=15,
                             fail_after=1, user="oidc-operator")
    started = time.monotonic()
    result = _probe(python_image, creds_ns, config, tmp_path, sleep=90)
    elapsed = time.monotonic() - started
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2, result.stdout + result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("imagekit: error: kubeconfig user 'oidc-operator': the exec "
                               "plugin could not renew the credential"), lines[0]
    assert "exited 1: error: the login session expired" in lines[0]
    assert "left behind" not in lines[0]
    assert elapsed < 45                  # stopped at the renewal, not at the probe's end
    assert len(plugin_runs(state)) >= 2
    # the Pod was deleted by the run (the kubelet may still be finishing it); its ConfigMap
    # and pull Secret are gone
    left = _objects_of_run(kube, creds_ns)
    pods = [kube.get_pod(creds_ns, item.split("/", 1)[1]) for item in left
            if item.startswith("pods/")]
    assert all(pod is None or pod["metadata"].get("deletionTimestamp") for pod in pods), pods
    assert [item for item in left if not item.startswith("pods/")] == []


def test_cluster_probe_passes_through_a_front_that_closes_pooled_connections_unannounced(
        closing_front, kube, python_image, creds_ns, tmp_path) -> None:
    """GETs, watches and DELETEs sent on a connection the front closed are sent once more on
    a new connection, and a watch picks up from its last resourceVersion: the probe passes,
    on 2-second tokens, with no expired token sent and nothing left behind."""
    front = closing_front
    state = plugin_state(tmp_path / "plugin", front.key)
    config = exec_kubeconfig(tmp_path / "kubeconfig", front.url, front.cert, state, ttl=2)
    expired_before, dropped_before = front.expired, front.dropped
    # an earlier test's Pod may still be terminating in the namespace: only this run counts
    earlier = set(_objects_of_run(kube, creds_ns))
    result = _probe(python_image, creds_ns, config, tmp_path, sleep=8)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert checks["probe:slow"]["status"] == "PASS"
    assert checks["cleanup"]["status"] == "PASS"
    assert front.reused > 0                   # the client did pool the front's connections
    assert front.dropped > dropped_before     # and met the closed ones: the case was there
    assert front.expired == expired_before
    assert len(plugin_runs(state)) >= 3
    assert set(_objects_of_run(kube, creds_ns)) - earlier == set()


def test_cluster_gpu_preflight_passes_through_the_same_front(
        closing_front, kube, python_image, creds_ns, tmp_path) -> None:
    """`cluster gpu-preflight` (a CPU run: `--gpus 0`, a stand-in script that outlives several
    tokens) through the front that closes pooled connections unannounced, on 2-second
    tokens: PASS, its Pod and pull Secret gone."""
    front = closing_front
    state = plugin_state(tmp_path / "plugin", front.key)
    config = exec_kubeconfig(tmp_path / "kubeconfig", front.url, front.cert, state, ttl=2)
    script = tmp_path / "preflight_standin.py"
    script.write_text("import time\ntime.sleep(6)\nprint('PREFLIGHT_STANDIN_OK')\n")
    expired_before, dropped_before = front.expired, front.dropped
    result = subprocess.run(
        [sys.executable, "-m", "imagekit", "cluster", "gpu-preflight",
         str(python_image.reference), "--namespace", creds_ns, "--selector",
         "nvidia.com/gpu.present=true", "--gpus", "0", "--script", str(script), "--submit",
         "--json", "--kubeconfig", str(config), "--evidence-dir", str(tmp_path / "evidence")],
        capture_output=True, text=True, timeout=240, cwd=REPO,
        env={**os.environ, "IMAGEKIT_PROGRESS": "plain"})
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    checks = {c["name"]: c for c in doc["checks"]}
    assert checks["preflight_pod"]["status"] == "PASS"
    assert checks["cleanup"]["status"] == "PASS"
    assert "PREFLIGHT_STANDIN_OK" in (Path(doc["evidence"]) / "pod.log").read_text()
    assert front.dropped > dropped_before
    assert front.expired == expired_before
    assert len(plugin_runs(state)) >= 3
    left = [s["metadata"]["name"] for s in kube.resource("Secret").list(creds_ns)
            if s["metadata"]["name"].startswith("gpu-preflight-")]
    assert left == []
