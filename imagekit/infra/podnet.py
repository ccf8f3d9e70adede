"""The local cluster's Pod network: a Linux bridge on this machine only, Debian's CNI plugins,
kube-proxy (iptables mode) for Services. Nothing is routed off the machine.

Shape (the same as a real single-node cluster with the reference `bridge` plugin):

- containerd's CRI runs Debian's `containernetworking-plugins` (`bridge` + `host-local` +
  `portmap`, and `loopback` for `lo`): every Pod gets a veth on the bridge `ikpod0` and an
  address from 10.244.0.0/24; the bridge holds the gateway 10.244.0.1.
- Pods get NO default route: only the Pod subnet (on-link) and the Service range 10.96.0.0/12
  via the bridge. A Pod cannot even address anything outside; and the filter chain
  `IMAGEKIT-PODNET` (first in FORWARD) accepts bridge-to-bridge traffic and drops everything
  forwarded out of, or into, the bridge from any other interface — so also a Pod that added a
  route itself reaches nothing beyond this machine's bridge. No `ipMasq` (no SNAT to the outside).
- kube-proxy (iptables mode, built from the same Debian source as the other binaries) turns
  ClusterIP Services into DNAT rules; its masquerade mark only rewrites Service traffic that
  stays on the bridge (hairpin), NodePorts listen on loopback only.
- The host gets a route for the Service range into the bridge, so a Service IP contacted from
  the host never follows the default route either.
- DNS: there is no cluster DNS (no CoreDNS image can be pulled). Pods find Services by the
  `<NAME>_SERVICE_HOST`/`_PORT` variables the kubelet injects, or are given the Service IP.

`ensure()` is idempotent; `teardown()` removes exactly what this module and kube-proxy added:
the bridge (and with it the host route), the `IMAGEKIT-PODNET` chain and its jump, kube-proxy's
`KUBE-*` rules (`kube-proxy --cleanup`), portmap's chains when empty, the Pods' netns.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import InfraError

BRIDGE = "ikpod0"
NETWORK_NAME = "imagekit-podnet"
POD_SUBNET = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
GATEWAY = "10.244.0.1"
SERVICE_CIDR = "10.96.0.0/12"
CHAIN = "IMAGEKIT-PODNET"
#: Sorted before the old `10-lo-only.conflist`: containerd loads the first file by name, so an
#: older checkout re-writing that file cannot switch the network back.
CONFLIST = "05-imagekit-podnet.conflist"
OLD_CONFLISTS = ("10-lo-only.conflist",)
PLUGINS = ("bridge", "host-local", "portmap", "loopback")
CNI_DIR = Path("/usr/lib/cni")


@dataclass(frozen=True)
class PodNetwork:
    """One bridge network; the cluster uses `DEFAULT`, the kubelet-less test a scratch one."""

    bridge: str = BRIDGE
    subnet: str = POD_SUBNET
    gateway: str = GATEWAY
    service_cidr: str = SERVICE_CIDR
    chain: str = CHAIN
    name: str = NETWORK_NAME


DEFAULT = PodNetwork()
PORTMAP_CHAINS = ("CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ")
ROUTE_LOCALNET = Path("/proc/sys/net/ipv4/conf/all/route_localnet")


def conflist(ipam_dir: Path, net: PodNetwork = DEFAULT) -> dict:
    """The CNI network: bridge with the gateway address, host-local IPAM with no default route,
    portmap for hostPorts. `ipam_dir` lies below the cluster's containerd dir (wiped by down)."""
    return {
        "cniVersion": "0.4.0", "name": net.name,
        "plugins": [
            {"type": "bridge", "bridge": net.bridge, "isGateway": True,
             "isDefaultGateway": False, "ipMasq": False, "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(ipam_dir),
                      "ranges": [[{"subnet": net.subnet, "gateway": net.gateway}]],
                      "routes": [{"dst": net.service_cidr}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ]}


def install_cni(cni_bin: Path, cni_conf: Path, ipam_dir: Path) -> None:
    """Copy the plugins and write the conflist; containerd's CRI watches `cni_conf` and uses
    the new network for every new sandbox without a restart (running Pods keep theirs)."""
    cni_bin.mkdir(parents=True, exist_ok=True)
    cni_conf.mkdir(parents=True, exist_ok=True)
    for plugin in PLUGINS:
        source = CNI_DIR / plugin
        if not source.is_file():
            raise InfraError(f"CNI plugin {plugin} missing (package containernetworking-plugins)",
                             where=str(source))
        target = cni_bin / plugin
        if not target.is_file() or target.read_bytes() != source.read_bytes():
            tmp = target.with_suffix(".new")
            shutil.copy2(source, tmp)
            tmp.replace(target)
    text = json.dumps(conflist(ipam_dir, DEFAULT), indent=2) + "\n"
    path = cni_conf / CONFLIST
    if not path.is_file() or path.read_text() != text:
        tmp = cni_conf / (CONFLIST + ".tmp")   # not *.conflist: never loaded half-written
        tmp.write_text(text)
        tmp.replace(path)
    for old in OLD_CONFLISTS:
        (cni_conf / old).unlink(missing_ok=True)


# ------------------------------------------------------------------------------ host side

def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False,
                            timeout=30)
    if check and result.returncode != 0:
        raise InfraError(f"ip {' '.join(args)} failed: {result.stderr.strip()}", where="ip")
    return result


def _ipt(*args: str, table: str = "filter", check: bool = True
         ) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["iptables", "-w", "10", "-t", table, *args], capture_output=True,
                            text=True, check=False, timeout=60)
    if check and result.returncode != 0:
        raise InfraError(f"iptables -t {table} {' '.join(args)} failed: "
                         f"{result.stderr.strip()}", where="iptables")
    return result


def bridge_exists(bridge: str = BRIDGE) -> bool:
    return _ip("link", "show", "dev", bridge, check=False).returncode == 0


def ensure_bridge(net: PodNetwork = DEFAULT) -> None:
    """The bridge with the gateway address and the host route for the Service range, made
    before the first Pod (the bridge plugin finds and keeps them)."""
    if not bridge_exists(net.bridge):
        _ip("link", "add", net.bridge, "type", "bridge")
    prefix = ipaddress.ip_network(net.subnet).prefixlen
    if f"inet {net.gateway}/" not in _ip("-4", "addr", "show", "dev", net.bridge).stdout:
        _ip("addr", "add", f"{net.gateway}/{prefix}", "dev", net.bridge)
    _ip("link", "set", net.bridge, "up")
    _ip("route", "replace", net.service_cidr, "dev", net.bridge)


def forward_rules(net: PodNetwork = DEFAULT) -> tuple[tuple[str, ...], ...]:
    return (("-i", net.bridge, "-o", net.bridge, "-j", "ACCEPT"),
            ("-i", net.bridge, "-j", "DROP"),    # nothing leaves the bridge for elsewhere
            ("-o", net.bridge, "-j", "DROP"))    # nothing from elsewhere reaches a Pod


def ensure_isolation(net: PodNetwork = DEFAULT) -> None:
    """The chain (`IMAGEKIT-PODNET`), jumped to first from FORWARD (before Docker's chains)."""
    if _ipt("-S", net.chain, check=False).returncode != 0:
        _ipt("-N", net.chain)
    for rule in forward_rules(net):
        if _ipt("-C", net.chain, *rule, check=False).returncode != 0:
            _ipt("-A", net.chain, *rule)
    rules = [line for line in _ipt("-S", "FORWARD").stdout.splitlines()
             if line.startswith("-A FORWARD")]
    jump = f"-A FORWARD -j {net.chain}"
    if not rules or rules[0] != jump:
        # First, also ahead of kube-proxy's KUBE-FORWARD (which accepts its masquerade-marked
        # packets — e.g. a Service whose Endpoints were set by hand to an outside address).
        while _ipt("-C", "FORWARD", "-j", net.chain, check=False).returncode == 0:
            _ipt("-D", "FORWARD", "-j", net.chain)
        _ipt("-I", "FORWARD", "1", "-j", net.chain)


def kube_proxy_synced() -> bool:
    """kube-proxy has put its FORWARD jumps in place (it inserts them at the top)."""
    return "-j KUBE-FORWARD" in _ipt("-S", "FORWARD", check=False).stdout


def ensure(state_file: Path, net: PodNetwork = DEFAULT) -> None:
    """Bridge, host route, isolation chain; remembers route_localnet (kube-proxy sets it to 1
    for loopback NodePorts) so teardown puts it back."""
    if not state_file.is_file():
        state_file.parent.mkdir(parents=True, exist_ok=True)
        # only the cluster's own network runs with kube-proxy (a scratch one never touches it)
        saved = _read_sysctl(ROUTE_LOCALNET) if net == DEFAULT else None
        state_file.write_text(json.dumps({"route_localnet": saved}) + "\n")
    _ensure_bridge_netfilter()
    ensure_bridge(net)
    ensure_isolation(net)


BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def _ensure_bridge_netfilter() -> None:
    """Service traffic between two Pods of one bridge needs bridged frames to pass iptables
    (conntrack un-DNATs the reply that goes Pod to Pod on the bridge). br_netfilter is loaded
    by dockerd, which infra starts first; without it, say so instead of half-working."""
    value = _read_sysctl(BRIDGE_NF)
    if value is None:
        raise InfraError("br_netfilter is not loaded (no bridge-nf-call-iptables): ClusterIP "
                         "Services between Pods would not work; start docker first "
                         "(`imagekit infra up`) or load the module", where=str(BRIDGE_NF))
    if value != "1":
        try:
            BRIDGE_NF.write_text("1")
        except OSError as exc:
            raise InfraError(f"cannot enable bridge-nf-call-iptables: {exc.strerror}",
                             where=str(BRIDGE_NF)) from None


def _read_sysctl(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def kube_proxy_argv(binary: Path, kubeconfig: Path, node_name: str) -> list[str]:
    return [str(binary), f"--kubeconfig={kubeconfig}", "--proxy-mode=iptables",
            f"--cluster-cidr={CLUSTER_CIDR}", f"--hostname-override={node_name}",
            "--bind-address=127.0.0.1", "--healthz-bind-address=127.0.0.1:10256",
            "--metrics-bind-address=127.0.0.1:10249", "--nodeport-addresses=127.0.0.0/8",
            # leave the machine's conntrack sysctls alone (a VM may refuse them)
            "--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0",
            "--conntrack-tcp-timeout-close-wait=0"]


def sandbox_netns(ctr: list[str]) -> list[Path]:
    """Network namespaces of containerd's Pod sandboxes (from their OCI specs)."""
    ids = subprocess.run([*ctr, "containers", "ls", "-q"], capture_output=True, text=True,
                         check=False, timeout=30).stdout.split()
    found: list[Path] = []
    for cid in ids:
        info = subprocess.run([*ctr, "containers", "info", cid], capture_output=True, text=True,
                              check=False, timeout=30).stdout
        try:
            spec = json.loads(info).get("Spec") or {}
        except json.JSONDecodeError:
            continue
        for ns in (spec.get("linux") or {}).get("namespaces") or []:
            path = ns.get("path") or ""
            if ns.get("type") == "network" and path.startswith(("/var/run/netns/", "/run/netns/")):
                found.append(Path(path))
    return sorted(set(found))


def netns_on_subnet(net: PodNetwork = DEFAULT) -> list[Path]:
    """`cni-*` namespaces holding an address of this network's subnet: the fallback when
    containerd is not there to name its sandboxes (it crashed before `down`)."""
    subnet = ipaddress.ip_network(net.subnet)
    found = []
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith("cni-"):
            continue
        for word in _ip("-n", name, "-4", "-o", "addr", "show", check=False).stdout.split():
            if "/" in word:
                try:
                    if ipaddress.ip_interface(word).ip in subnet:
                        found.append(Path("/run/netns") / name)
                        break
                except ValueError:
                    continue
    return found


def remove_netns(paths: list[Path]) -> None:
    for path in paths:
        if path.exists():
            _ip("netns", "delete", path.name, check=False)


def teardown(kube_proxy: Path | None, state_file: Path, net: PodNetwork = DEFAULT) -> None:
    """Remove what `ensure`, the CNI plugins and kube-proxy added. Safe to run twice."""
    if kube_proxy is not None and kube_proxy.is_file():
        subprocess.run([str(kube_proxy), "--cleanup", "--proxy-mode=iptables"],
                       capture_output=True, check=False, timeout=120)
    while _ipt("-C", "FORWARD", "-j", net.chain, check=False).returncode == 0:
        if _ipt("-D", "FORWARD", "-j", net.chain, check=False).returncode != 0:
            break
    if _ipt("-S", net.chain, check=False).returncode == 0:
        _ipt("-F", net.chain, check=False)
        _ipt("-X", net.chain, check=False)
    _remove_empty_portmap_chains()
    if bridge_exists(net.bridge):
        _ip("link", "delete", net.bridge, "type", "bridge", check=False)
    if state_file.is_file():
        try:
            previous = json.loads(state_file.read_text()).get("route_localnet")
        except (OSError, json.JSONDecodeError):
            previous = None
        if previous is not None and _read_sysctl(ROUTE_LOCALNET) != previous:
            with contextlib.suppress(OSError):
                ROUTE_LOCALNET.write_text(previous)
        state_file.unlink(missing_ok=True)


def _remove_empty_portmap_chains() -> None:
    """portmap's chains are shared by every CNI user of the machine: removed only when no
    rule is left in them (each Pod's own rules went with its CNI DEL)."""
    listing = _ipt("-S", table="nat", check=False).stdout.splitlines()
    for chain in PORTMAP_CHAINS:
        if f"-N {chain}" not in listing:
            continue
        own = [line for line in listing if line.startswith(f"-A {chain} ")]
        if chain == "CNI-HOSTPORT-MASQ":
            own = [line for line in own if "MASQUERADE" not in line or "0x2000" not in line]
        if own:
            continue
        for line in listing:
            if f"-j {chain}" in line and line.startswith("-A "):
                _ipt("-D", *shlex.split(line[3:]), table="nat", check=False)
        _ipt("-F", chain, table="nat", check=False)
        _ipt("-X", chain, table="nat", check=False)


def cni_chain(conf: dict, command: str, netns: Path, container_id: str,
              cni_path: Path = CNI_DIR, ifname: str = "eth0") -> dict | None:
    """Run a conflist's plugins as a CNI runtime does (ADD in order with prevResult, DEL in
    reverse): the kubelet-less way to try a network before containerd uses it."""
    import os

    plugins = conf["plugins"] if command == "ADD" else list(reversed(conf["plugins"]))
    result: dict | None = None
    for plugin in plugins:
        stdin = dict(plugin, name=conf["name"], cniVersion=conf["cniVersion"])
        if result is not None:
            stdin["prevResult"] = result
        env = {**os.environ, "CNI_COMMAND": command, "CNI_CONTAINERID": container_id,
               "CNI_NETNS": str(netns), "CNI_IFNAME": ifname, "CNI_PATH": str(cni_path)}
        done = subprocess.run([str(cni_path / plugin["type"])], input=json.dumps(stdin),
                              capture_output=True, text=True, env=env, check=False,
                              timeout=60)
        if done.returncode != 0:
            raise InfraError(f"CNI {plugin['type']} {command} failed: "
                             f"{(done.stdout or done.stderr).strip()[:300]}",
                             where=str(cni_path / plugin["type"]))
        if command == "ADD" and done.stdout.strip():
            result = json.loads(done.stdout)
    return result
