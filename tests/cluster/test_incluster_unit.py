"""In-cluster credentials (client-go's rest.InClusterConfig): where a connection comes from,
the mounted token, CA and namespace read, the token re-read when the kubelet rotates it, and
bad mounted files refused with one line before any request. The real API server's side is in
test_incluster_real.py (a ServiceAccount's token from the host, and imagekit inside a Pod)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from imagekit.errors import InfraError
from imagekit.kube import Kube
from imagekit.kube.incluster import SERVICEACCOUNT_DIR, InCluster, choose, detect
from imagekit.kube.kubeauth import KubeCredentialError

from .kube_front import _self_signed

IN_POD = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def jwt(subject: str) -> str:
    def part(doc: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")
    return f"{part({'alg': 'RS256'})}.{part({'sub': subject})}.c2lnbmF0dXJl"


def mounted(folder: Path, *, token: str | None = None, namespace: str | None = "team-a",
            ca: bool = True) -> Path:
    """A ServiceAccount folder as the kubelet mounts it."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(jwt("system:serviceaccount:team-a:imagekit")
                                  if token is None else token)
    if namespace is not None:
        (folder / "namespace").write_text(namespace)
    if ca:
        cert, _ = _self_signed(folder)
        cert.rename(folder / "ca.crt")
    return folder


def test_the_order_is_flag_then_kubeconfig_variable_then_home_then_in_cluster(
        tmp_path: Path) -> None:
    sa = mounted(tmp_path / "sa")
    home = tmp_path / "home"
    given = tmp_path / "given.yaml"
    assert choose(given, serviceaccount_dir=sa, home=home, environ=IN_POD) == given
    listed = {**IN_POD, "KUBECONFIG": os.pathsep.join(["/k/one", "/k/two"])}
    assert choose(None, serviceaccount_dir=sa, home=home, environ=listed) == Path("/k/one")
    found = choose(None, serviceaccount_dir=sa, home=home, environ=IN_POD)
    assert found == InCluster("10.96.0.1", "443", sa)
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text("{}")
    assert choose(None, serviceaccount_dir=sa, home=home, environ=IN_POD) == \
        home / ".kube" / "config"


def test_outside_a_pod_nothing_found_is_one_line_naming_where_it_looked(
        tmp_path: Path) -> None:
    sa = mounted(tmp_path / "sa")
    assert detect(sa, {}) is None                                     # no Service variables
    assert detect(tmp_path / "none", IN_POD) is None                  # no token mounted
    assert detect(None, IN_POD) in (None, InCluster("10.96.0.1", "443", SERVICEACCOUNT_DIR))
    with pytest.raises(InfraError) as caught:
        choose(None, serviceaccount_dir=tmp_path / "none", home=tmp_path, environ={})
    line = caught.value.one_line()
    assert "no kubeconfig and no in-cluster ServiceAccount" in line
    assert str(tmp_path / "none" / "token") in line and "\n" not in line


def test_in_cluster_uses_the_mounted_token_ca_and_namespace(tmp_path: Path) -> None:
    sa = mounted(tmp_path / "sa")
    with Kube(InCluster("10.96.0.1", "443", sa)) as kube:
        assert kube.host == "https://10.96.0.1:443"
        assert kube.default_namespace == "team-a"
        assert kube.user == "system:serviceaccount:team-a:imagekit"
        assert kube.kubeconfig == sa and kube.in_cluster == InCluster("10.96.0.1", "443", sa)
        assert kube.credentials.current().header == f"Bearer {(sa / 'token').read_text()}"
        with kube.another() as second:       # a log follower's connection: the same source
            assert second.in_cluster == kube.in_cluster


def test_kube_without_arguments_finds_the_pod(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sa = mounted(tmp_path / "sa", namespace=None, ca=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    for name, value in {**IN_POD, "KUBERNETES_SERVICE_HOST": "fd00::1"}.items():
        monkeypatch.setenv(name, value)
    with Kube(serviceaccount_dir=sa) as kube:
        assert kube.host == "https://[fd00::1]:443"
        assert kube.default_namespace == "default"     # no namespace file: client-go's default


def test_a_rotated_token_is_read_again(tmp_path: Path) -> None:
    sa = mounted(tmp_path / "sa")
    with Kube(InCluster("10.96.0.1", "443", sa)) as kube:
        first = kube.credentials.current().header
        rotated = jwt("system:serviceaccount:team-a:imagekit") + "-rotated"
        (sa / "..data-new").write_text(rotated)       # the kubelet swaps the file atomically
        (sa / "..data-new").replace(sa / "token")
        assert kube.credentials.current().header == f"Bearer {rotated}" != first


@pytest.mark.parametrize(("case", "message"), [
    ("unreadable", "in-cluster ServiceAccount: cannot read the token file: Is a directory"),
    ("empty", "in-cluster ServiceAccount: the token file is empty"),
    ("bad-ca", "in-cluster ServiceAccount: ca.crt cannot be loaded as a PEM certificate"),
])
def test_bad_mounted_files_are_one_line_before_any_request(tmp_path: Path, case: str,
                                                           message: str) -> None:
    sa = mounted(tmp_path / "sa", token="" if case == "empty" else None)
    if case == "unreadable":       # root reads any file: a token that is a folder is unreadable
        (sa / "token").unlink()
        (sa / "token").mkdir()
    if case == "bad-ca":
        (sa / "ca.crt").write_text("not a certificate\n")
    with pytest.raises(KubeCredentialError) as caught:
        Kube(InCluster("127.0.0.1", "1", sa))     # nothing listens there: nothing was sent
    assert caught.value.exit_code == 2
    assert caught.value.one_line().startswith(message), caught.value.one_line()
