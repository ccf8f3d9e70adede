"""The operator's cluster for the real-cluster tests: a namespace labelled
`pod-security.kubernetes.io/enforce`, a ServiceAccount bound by exactly what
`imagekit cluster rbac` prints, and a kubeconfig carrying that ServiceAccount's token (a
TokenRequest, as `kubectl create token` makes one). Bringing the cluster up stays admin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml


def rbac_documents(namespace: str, *args: str) -> list[dict]:
    """What `imagekit cluster rbac --namespace NS` prints, parsed."""
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "rbac", "--namespace",
                           namespace, *args], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def grant(admin, namespace: str, *args: str,
          edit: Callable[[list[dict]], None] | None = None) -> list[dict]:
    """Apply `cluster rbac`'s objects as the administrator (`edit` may change them first)."""
    documents = rbac_documents(namespace, *args)
    if edit is not None:
        edit(documents)
    for doc in documents:
        admin.apply(doc)
    return documents


def without_verb(verb: str, resource: str) -> Callable[[list[dict]], None]:
    """An `edit` that takes one verb off one resource in the Role."""
    def edit(documents: list[dict]) -> None:
        role = next(d for d in documents if d["kind"] == "Role")
        rules = []
        for rule in role["rules"]:
            if resource in rule["resources"] and verb in rule["verbs"]:
                others = [r for r in rule["resources"] if r != resource]
                if others:
                    rules.append({**rule, "resources": others})
                rest = [v for v in rule["verbs"] if v != verb]
                if rest:
                    rules.append({**rule, "resources": [resource], "verbs": rest})
            else:
                rules.append(rule)
        role["rules"] = rules
    return edit


def token_kubeconfig(admin, admin_kubeconfig: Path, namespace: str, account: str,
                     path: Path, seconds: int = 3600) -> Path:
    """A kubeconfig that authenticates as `namespace/account` with a bound token."""
    from imagekit.kube import kubeconfig

    minted = admin.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                              "spec": {"expirationSeconds": seconds}})
    target = kubeconfig.load(admin_kubeconfig)
    cluster = {"server": target.cluster.server}
    if target.cluster.certificate_authority:
        cluster["certificate-authority"] = str(target.resolve(
            target.cluster.certificate_authority))
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "operator",
           "clusters": [{"name": "local", "cluster": cluster}],
           "users": [{"name": account, "user": {"token": minted["status"]["token"]}}],
           "contexts": [{"name": "operator", "context": {"cluster": "local", "user": account,
                                                          "namespace": namespace}}]}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(doc, out)
    return path


def namespace_objects(admin, namespace: str) -> list[str]:
    """`Kind name` of every Pod, ConfigMap (but the API's own root CA), Secret (but token
    Secrets), Service and Job in the namespace: what a run may leave behind."""
    left = []
    for kind, api in (("Pod", "v1"), ("ConfigMap", "v1"), ("Secret", "v1"), ("Service", "v1"),
                      ("Job", "batch/v1")):
        for item in admin.resource(kind, api).list(namespace):
            name = item["metadata"]["name"]
            if kind == "ConfigMap" and name == "kube-root-ca.crt":
                continue
            if kind == "Secret" and item.get("type") == "kubernetes.io/service-account-token":
                continue
            left.append(f"{kind} {name}")
    return left


class PodsSeen:
    """Every Pod of a namespace as the API server returns it, read while a run goes on (the
    run deletes its Pods at the end)."""

    def __init__(self, kube, namespace: str) -> None:
        self.kube, self.namespace, self.pods = kube, namespace, {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        client = self.kube.another()
        while not self.stop.is_set():
            for pod in client.resource("Pod").list(self.namespace):
                self.pods[pod["metadata"]["name"]] = pod
            time.sleep(0.3)

    def __enter__(self) -> PodsSeen:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
