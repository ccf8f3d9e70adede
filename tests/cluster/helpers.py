"""Helpers of the real-cluster tests."""

from __future__ import annotations

import time
from pathlib import Path

BUSYBOX = "docker.io/library/busybox:1.36"   # imported into containerd by infra, never pulled
NODE = "127.0.0.1"
# How long a test waits for a deleted Pod to leave the API. kubelet 1.20 removes the object only
# after its pod worker, volume manager and cgroup cleanup have all caught up; on a loaded CI host
# that was seen to take over 60 s for a Pod with a 10 s grace period (cluster accept's cleanup
# waits as long; probe and preflight 120 s).
POD_GONE_S = 150


def busybox_pod(name: str, namespace: str, **spec: object) -> dict:
    """A Pod on the node that needs no registry; exits 0 on SIGTERM after 3 s (so a delete
    leaves it Terminating for a moment, like a real server shutting down). It meets the
    restricted Pod Security level, as every Pod imagekit makes does."""
    from imagekit.cluster.manifests import CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT

    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"securityContext": POD_SECURITY_CONTEXT,
                     "nodeSelector": {"nvidia.com/gpu.present": "true"},
                     "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                      "effect": "NoSchedule"}],
                     "terminationGracePeriodSeconds": 10,
                     "automountServiceAccountToken": False,
                     "containers": [{"name": "c", "image": BUSYBOX, "imagePullPolicy": "Never",
                                     "securityContext": CONTAINER_SECURITY_CONTEXT,
                                     "command": ["sh", "-c", "trap 'sleep 3; exit 0' TERM; "
                                                 "while true; do sleep 1; done"]}],
                     **spec}}


def wait_running(kube, namespace: str, name: str, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = kube.get_pod(namespace, name)
        if pod and pod.get("status", {}).get("phase") == "Running":
            return pod
        time.sleep(0.5)
    raise AssertionError(f"pod {name} not Running after {timeout}s: "
                         f"{(pod or {}).get('status')}")


def image_phase_snapshot(store) -> Path:  # noqa: ANN001 - an EvidenceStore
    """Where the vllm_image fixture keeps the copy of its store holding the image phase alone
    (before test_accept_real files its cluster accepts, some failing on purpose)."""
    return store.root.parent / f"{store.root.name}-image-phase"
