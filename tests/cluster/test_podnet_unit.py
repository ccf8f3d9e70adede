"""The Pod network's pure parts: the CNI config routes nothing off the machine, kube-proxy's
flags, the switch from the old loopback-only config (no root needed)."""

from __future__ import annotations

import json
from pathlib import Path

from imagekit.infra import podnet


def test_conflist_has_no_default_route_and_no_masquerade(tmp_path: Path) -> None:
    conf = podnet.conflist(tmp_path / "ipam")
    bridge = conf["plugins"][0]
    assert bridge["type"] == "bridge" and bridge["bridge"] == podnet.BRIDGE
    assert bridge["isGateway"] is True and bridge["isDefaultGateway"] is False
    assert bridge["ipMasq"] is False and bridge["hairpinMode"] is True
    ipam = bridge["ipam"]
    assert ipam["type"] == "host-local" and ipam["dataDir"] == str(tmp_path / "ipam")
    assert ipam["routes"] == [{"dst": podnet.SERVICE_CIDR}]          # no 0.0.0.0/0
    assert ipam["ranges"] == [[{"subnet": podnet.POD_SUBNET, "gateway": podnet.GATEWAY}]]
    assert [p["type"] for p in conf["plugins"]] == ["bridge", "portmap"]


def test_install_switches_from_the_loopback_only_network(tmp_path: Path) -> None:
    cni_bin, cni_conf = tmp_path / "bin", tmp_path / "conf"
    cni_conf.mkdir()
    (cni_conf / "10-lo-only.conflist").write_text("{}")
    podnet.install_cni(cni_bin, cni_conf, tmp_path / "ipam")
    assert sorted(p.name for p in cni_conf.iterdir()) == [podnet.CONFLIST]
    assert podnet.CONFLIST < "10-lo-only.conflist"   # wins if an old checkout writes it again
    assert {p.name for p in cni_bin.iterdir()} == set(podnet.PLUGINS)
    written = json.loads((cni_conf / podnet.CONFLIST).read_text())
    assert written == podnet.conflist(tmp_path / "ipam")
    before = (cni_conf / podnet.CONFLIST).stat().st_mtime_ns
    podnet.install_cni(cni_bin, cni_conf, tmp_path / "ipam")       # idempotent: untouched
    assert (cni_conf / podnet.CONFLIST).stat().st_mtime_ns == before


def test_kube_proxy_flags() -> None:
    argv = podnet.kube_proxy_argv(Path("/opt/k8s/bin/kube-proxy"), Path("/k/admin"), "127.0.0.1")
    assert "--proxy-mode=iptables" in argv and f"--cluster-cidr={podnet.CLUSTER_CIDR}" in argv
    assert "--nodeport-addresses=127.0.0.0/8" in argv and "--bind-address=127.0.0.1" in argv
    assert "--conntrack-max-per-core=0" in argv and "--hostname-override=127.0.0.1" in argv
