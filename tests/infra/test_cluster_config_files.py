"""The cluster's containerd config.toml, hosts.toml and kubelet-config.yaml come from
tomli-w / yaml.safe_dump: they mean exactly what the f-string templates they replace meant.

The templates below are the former ones, verbatim (imagekit/infra/cluster.py before the change):
both are parsed by the real parsers (tomllib, PyYAML) and compared as documents."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
import yaml

from imagekit.infra import cluster
from imagekit.infra.cluster import (
    PAUSE_IMAGE,
    containerd_config,
    kubelet_config_doc,
    registry_hosts_toml,
)


def _legacy_containerd(d: Path) -> str:
    return f"""version = 2
root = "{d}/root"
state = "{d}/state"
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "{d}/runc-wrap"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni-bin"
    conf_dir = "{d}/cni-conf"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
"""


def _legacy_kubelet(pki: str) -> str:
    return f"""apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
failSwapOn: false
authentication: {{anonymous: {{enabled: false}}, webhook: {{enabled: false}}, x509: {{clientCAFile: "{pki}/ca.crt"}}}}
authorization: {{mode: AlwaysAllow}}
evictionHard: {{memory.available: "100Mi", nodefs.available: "512Mi", imagefs.available: "512Mi"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# ConfigMap updates reach mounted volumes at the Pod's next sync: 10 s instead of 1 min, so the
# ConfigMap-switch regression test does not wait a minute per update.
syncFrequency: 10s
clusterDomain: cluster.local
"""  # noqa: E501


def _legacy_hosts(address: str, scheme: str, ca: Path | None) -> str:
    lines = [f'server = "{scheme}://{address}"', 'capabilities = ["pull", "resolve"]']
    if ca is not None:
        lines.append(f'ca = "{ca}"')
    lines.append("[host]")
    return "\n".join(lines) + "\n"


# a path with characters a template would have had to escape by hand
_ODD = Path('/var/lib/image kit/k8s "q"/ctrd')


@pytest.mark.parametrize("d", [Path("/var/lib/imagekit/k8s/ctrd"), Path("/tmp/x/ctrd")])
def test_containerd_config_means_what_the_template_meant(d: Path) -> None:
    import tomli_w

    new = tomllib.loads(tomli_w.dumps(containerd_config(d)))
    assert new == tomllib.loads(_legacy_containerd(d))
    runc = new["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]
    assert runc["options"] == {"SystemdCgroup": False, "BinaryName": f"{d}/runc-wrap"}


def test_containerd_config_escapes_what_the_template_could_not() -> None:
    import tomli_w

    with pytest.raises(tomllib.TOMLDecodeError):      # the template broke on a quote
        tomllib.loads(_legacy_containerd(_ODD))
    assert tomllib.loads(tomli_w.dumps(containerd_config(_ODD)))["root"] == f"{_ODD}/root"


@pytest.mark.parametrize("pki", ["/var/lib/imagekit/k8s/pki", "/tmp/x/pki"])
def test_kubelet_config_means_what_the_template_meant(pki: str) -> None:
    new = yaml.safe_load(yaml.safe_dump(kubelet_config_doc(Path(pki)), sort_keys=False))
    old = yaml.safe_load(_legacy_kubelet(pki))
    assert new == old
    # types, not only values: the kubelet rejects "10250" for a port and 0 for "10s"
    assert [type(new[k]) for k in ("port", "failSwapOn", "syncFrequency", "address")] == [
        int, bool, str, str]


@pytest.mark.parametrize("scheme,ca", [("http", None), ("https", Path("/s/certs.d/ca.crt"))])
def test_hosts_toml_means_what_the_template_meant(scheme: str, ca: Path | None) -> None:
    new = tomllib.loads(registry_hosts_toml("127.0.0.1:5003", scheme, ca))
    assert new == tomllib.loads(_legacy_hosts("127.0.0.1:5003", scheme, ca))
    assert new["host"] == {}


def test_a_changed_document_is_seen_as_changed(tmp_path: Path) -> None:
    """The comparison can fail: one changed value makes the documents differ."""
    import tomli_w

    doc = containerd_config(tmp_path)
    doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"]["options"][
        "SystemdCgroup"] = True
    assert tomllib.loads(tomli_w.dumps(doc)) != tomllib.loads(_legacy_containerd(tmp_path))
    kubelet = kubelet_config_doc(tmp_path)
    kubelet["port"] = "10250"
    assert kubelet != yaml.safe_load(_legacy_kubelet(str(tmp_path)))


def test_rendered_into_a_temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """_write_containerd_config writes config.toml + hosts.toml the real parser reads back."""
    from imagekit.infra.state import InfraState, RegistryEndpoint

    monkeypatch.setattr(cluster.podnet, "install_cni", lambda *a: None)
    ca = tmp_path / "ca.pem"
    ca.write_text("CA")
    state = InfraState(
        state_dir=tmp_path, docker_config_dir=tmp_path, ca_file=ca,
        registries={"staging": RegistryEndpoint(name="staging", address="127.0.0.1:5001",
                                                scheme="http", auth="none")})
    paths = cluster.ClusterPaths(tmp_path)
    fp = cluster._write_containerd_config(paths, state)
    assert len(fp) == 16
    written = tomllib.loads((paths.ctrd / "config.toml").read_text())
    assert written == tomllib.loads(_legacy_containerd(paths.ctrd))
    assert (paths.ctrd / "runc-wrap").is_file()
    hosts = tomllib.loads((paths.certs_d / "127.0.0.1:5001/hosts.toml").read_text())
    assert hosts == {"server": "http://127.0.0.1:5001", "capabilities": ["pull", "resolve"],
                     "host": {}}
    assert cluster._write_containerd_config(paths, state) == fp     # stable fingerprint


def test_same_meaning_keeps_the_file_and_the_fingerprint(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The config fingerprint (a change restarts containerd and the kubelet) is of the files'
    bytes, and a file is rewritten only when its meaning changes: files the former templates
    wrote (the running cluster's) are kept, with the fingerprint the former code computed, so
    the first `infra up --cluster` with this code restarts nothing. A changed value rewrites."""
    import hashlib

    import tomli_w

    from imagekit.infra.state import InfraState, RegistryEndpoint

    monkeypatch.setattr(cluster.podnet, "install_cni", lambda *a: None)
    ca = tmp_path / "ca.pem"
    ca.write_text("CA")
    state = InfraState(
        state_dir=tmp_path, docker_config_dir=tmp_path, ca_file=ca,
        registries={"target": RegistryEndpoint(name="target", address="127.0.0.1:5003",
                                               scheme="https", auth="bearer", ca_file=ca)})
    paths = cluster.ClusterPaths(tmp_path)
    config_file = paths.ctrd / "config.toml"
    hosts_file = paths.certs_d / "127.0.0.1:5003/hosts.toml"
    fp = cluster._write_containerd_config(paths, state)
    assert config_file.read_text() == tomli_w.dumps(containerd_config(paths.ctrd))
    # another layout of the same documents (a future tomli-w): nothing rewritten, same print
    dumps = tomli_w.dumps
    monkeypatch.setattr(cluster.tomli_w, "dumps",
                        lambda doc: dumps(doc, multiline_strings=True, indent=2))
    assert cluster._write_containerd_config(paths, state) == fp
    # the former templates' files (what the running cluster has): kept, the former print
    legacy = _legacy_containerd(paths.ctrd)
    legacy_hosts = _legacy_hosts("127.0.0.1:5003", "https", hosts_file.parent / "ca.crt")
    config_file.write_text(legacy)
    hosts_file.write_text(legacy_hosts)
    former = hashlib.sha256((legacy + legacy_hosts + "CA").encode()).hexdigest()[:16]
    assert cluster._write_containerd_config(paths, state) == former
    assert config_file.read_text() == legacy and hosts_file.read_text() == legacy_hosts
    # a changed value: rewritten, another print
    original = cluster.containerd_config

    def systemd(d: Path) -> dict:
        doc = original(d)
        doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["runc"][
            "options"]["SystemdCgroup"] = True
        return doc

    monkeypatch.setattr(cluster, "containerd_config", systemd)
    assert cluster._write_containerd_config(paths, state) not in (fp, former)
    assert tomllib.loads(config_file.read_text()) == systemd(paths.ctrd)
