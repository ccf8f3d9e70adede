"""The local cluster's real Pod network: Pod IPs on the bridge, Pod to Pod, a ClusterIP Service
through kube-proxy, a headless Service's endpoints, env-var Service discovery, no way out.
Plus the same network code kubelet-less on a scratch bridge, up and down, leaving nothing.

Clients are Pods that send one HTTP request with busybox `nc` (this busybox-static's `wget`
segfaults) and exit; their log is the answer (no exec needed)."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
from pathlib import Path

import pytest

from imagekit.infra import podnet

from .helpers import busybox_pod, wait_running

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

def get(host: str, port: str | int = 8080) -> str:
    """Shell (busybox ash builtins + nc only): one HTTP GET of /id; false when nothing
    answers."""
    return (f"out=$(printf 'GET /id HTTP/1.0\\r\\n\\r\\n' | nc -w 3 {host} {port}); "
            'echo "$out"; case "$out" in *"pod "*) true;; *) false;; esac')


SERVER = ("mkdir -p /tmp/www && echo \"pod $(hostname)\" > /tmp/www/id && "
          "exec httpd -f -p 8080 -h /tmp/www")   # /tmp: the Pod runs as a non-root user


def _server(name: str, ns: str) -> dict:
    pod = busybox_pod(name, ns)
    pod["metadata"]["labels"] = {"app": name}
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", SERVER]
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    return pod


def _client(kube, ns: str, name: str, script: str, timeout: float = 90) -> tuple[str, str]:
    """Run `script` in a one-shot busybox Pod; (phase, log)."""
    pod = busybox_pod(name, ns)
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0]["command"] = ["sh", "-c", script]
    kube.create(pod)
    deadline = time.monotonic() + timeout
    phase = None
    while time.monotonic() < deadline:
        phase = (kube.get_pod(ns, name) or {}).get("status", {}).get("phase")
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.5)
    log = kube.pod_logs(ns, name)
    kube.delete(kube.pod_path(ns, name), grace_seconds=0)
    return phase or "unknown", log


@pytest.fixture(scope="module")
def servers(kube, test_ns):
    made = []
    for name in ("web-a", "web-b"):
        kube.create(_server(name, test_ns))
        made.append(name)
    pods = {name: wait_running(kube, test_ns, name) for name in made}
    yield pods
    for name in made:
        kube.delete(kube.pod_path(test_ns, name), grace_seconds=0)


def test_pods_get_their_own_ips_on_the_bridge(servers) -> None:
    ips = {name: pod["status"]["podIP"] for name, pod in servers.items()}
    subnet = ipaddress.ip_network(podnet.POD_SUBNET)
    assert len(set(ips.values())) == 2, ips
    assert all(ipaddress.ip_address(ip) in subnet for ip in ips.values()), ips
    assert podnet.GATEWAY not in ips.values()
    assert podnet.bridge_exists()


def test_pod_reaches_pod_over_pod_ip(kube, test_ns, servers) -> None:
    target = servers["web-b"]["status"]["podIP"]
    phase, log = _client(kube, test_ns, "client-podip",
                         get(target))
    assert phase == "Succeeded" and "pod web-b" in log, log


def test_pod_reaches_pod_through_clusterip_service(kube, test_ns, servers) -> None:
    svc = kube.call("POST", f"/api/v1/namespaces/{test_ns}/services", body={
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web-a"},
                 "ports": [{"port": 80, "targetPort": 8080}]}})
    try:
        ip = svc["spec"]["clusterIP"]
        assert ipaddress.ip_address(ip) in ipaddress.ip_network(podnet.SERVICE_CIDR)
        # kube-proxy programs the rule within its sync period; the client retries for a while.
        # WEB_SERVICE_HOST: the kubelet's env-var discovery (no cluster DNS here).
        script = ("i=0; while [ $i -lt 30 ]; do "
                  f"{{ {get('$WEB_SERVICE_HOST', '$WEB_SERVICE_PORT')}; }} && exit 0; "
                  "i=$((i+1)); sleep 1; done; exit 1")
        phase, log = _client(kube, test_ns, "client-svc", f"echo svc=$WEB_SERVICE_HOST; {script}")
        assert f"svc={ip}" in log, log
        assert phase == "Succeeded" and "pod web-a" in log, log
    finally:
        kube.delete(f"/api/v1/namespaces/{test_ns}/services/web")


def test_pod_reaches_itself_through_its_service(kube, test_ns) -> None:
    """Hairpin: the path of the c10d store host, which joins its own rendezvous Service."""
    kube.call("POST", f"/api/v1/namespaces/{test_ns}/services", body={
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "hairpin"},
        "spec": {"selector": {"app": "hairpin"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    try:
        pod = busybox_pod("hairpin", test_ns)
        pod["metadata"]["labels"] = {"app": "hairpin"}
        pod["spec"]["restartPolicy"] = "Never"
        serve = SERVER.replace("exec httpd -f", "httpd")   # in the background
        pod["spec"]["containers"][0]["command"] = ["sh", "-c", (
            f"{serve}; i=0; while [ $i -lt 30 ]; do "
            f"{{ {get('$HAIRPIN_SERVICE_HOST', '$HAIRPIN_SERVICE_PORT')}; }} && exit 0; "
            "i=$((i+1)); sleep 1; done; exit 1")]
        kube.create(pod)
        deadline = time.monotonic() + 90
        phase = None
        while time.monotonic() < deadline and phase not in ("Succeeded", "Failed"):
            phase = (kube.get_pod(test_ns, "hairpin") or {}).get("status", {}).get("phase")
            time.sleep(0.5)
        log = kube.pod_logs(test_ns, "hairpin")
        assert phase == "Succeeded" and "pod hairpin" in log, (phase, log)
    finally:
        kube.delete(kube.pod_path(test_ns, "hairpin"), grace_seconds=0)
        kube.delete(f"/api/v1/namespaces/{test_ns}/services/hairpin")


def test_headless_service_lists_pod_ips_and_they_answer(kube, test_ns, servers) -> None:
    kube.call("POST", f"/api/v1/namespaces/{test_ns}/services", body={
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "webs"},
        "spec": {"clusterIP": "None", "selector": {"app": "web-b"},
                 "ports": [{"port": 8080, "targetPort": 8080}]}})
    try:
        want = servers["web-b"]["status"]["podIP"]
        deadline = time.monotonic() + 30
        ips: list[str] = []
        while time.monotonic() < deadline and want not in ips:
            ep = kube.maybe_get(f"/api/v1/namespaces/{test_ns}/endpoints/webs") or {}
            ips = [a["ip"] for s in ep.get("subsets") or [] for a in s.get("addresses") or []]
            time.sleep(0.5)
        assert ips == [want]
        phase, log = _client(kube, test_ns, "client-headless",
                             get(ips[0]))
        assert phase == "Succeeded" and "pod web-b" in log, log
    finally:
        kube.delete(f"/api/v1/namespaces/{test_ns}/services/webs")


def test_pod_has_no_route_off_the_machine(kube, test_ns) -> None:
    """No default route: only the Pod subnet and the Service range (never sends traffic)."""
    phase, log = _client(kube, test_ns, "client-routes", "cat /proc/net/route; busybox ip route")
    assert phase == "Succeeded", log
    rows = [line.split() for line in log.splitlines()[1:] if line.startswith("eth0")]
    destinations = {ipaddress.ip_address(int(r[1], 16).to_bytes(4, "little")) for r in rows}
    assert ipaddress.ip_address("0.0.0.0") not in destinations, log
    assert "default" not in log, log
    assert ipaddress.ip_address("10.96.0.0") in destinations, log   # the Service range
    assert ipaddress.ip_address("10.244.0.0") in destinations, log  # the Pod subnet


def test_host_forwards_nothing_between_the_bridge_and_elsewhere() -> None:
    forward = subprocess.run(["iptables", "-w", "10", "-S", "FORWARD"], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    rules = [line for line in forward if line.startswith("-A FORWARD")]
    ours = rules.index(f"-A FORWARD -j {podnet.CHAIN}")
    # ahead of kube-proxy's KUBE-FORWARD (it accepts masquerade-marked packets) and of any
    # ACCEPT (a dockerd restart may put its empty DOCKER-USER jump first; that is harmless)
    assert ours < next(i for i, r in enumerate(rules) if "KUBE-FORWARD" in r), rules
    assert not any("ACCEPT" in r for r in rules[:ours]), rules
    chain = subprocess.run(["iptables", "-w", "10", "-S", podnet.CHAIN], capture_output=True,
                           text=True, check=True).stdout
    assert f"-A {podnet.CHAIN} -i {podnet.BRIDGE} -j DROP" in chain
    assert f"-A {podnet.CHAIN} -o {podnet.BRIDGE} -j DROP" in chain
    nat = subprocess.run(["iptables", "-w", "10", "-t", "nat", "-S"], capture_output=True,
                         text=True, check=True).stdout
    assert "-j KUBE-SERVICES" in nat           # kube-proxy runs in iptables mode
    assert "10.244." not in "\n".join(line for line in nat.splitlines()
                                      if "MASQUERADE" in line and "-s" in line)


def test_infra_up_again_changes_nothing(cluster_state) -> None:
    """Idempotent: a second `infra up --cluster` keeps containerd, kubelet and kube-proxy
    (same PIDs), one isolation jump, the same conflist."""
    import sys

    from imagekit.infra import processes
    from imagekit.infra.state import StatePaths

    paths = StatePaths(cluster_state.state_dir)
    names = ("k8s-containerd", "k8s-kubelet", "k8s-kube-proxy")
    before = {n: processes.running(n, paths) for n in names}
    assert all(before.values()), before
    conf = cluster_state.state_dir / "k8s" / "ctrd" / "cni-conf" / podnet.CONFLIST
    stamp = conf.stat().st_mtime_ns
    done = subprocess.run([sys.executable, "-m", "imagekit", "infra", "up", "--cluster"],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    after = {n: processes.running(n, paths) for n in names}
    assert {n: r.pid for n, r in after.items() if r} == {n: r.pid for n, r in before.items()}
    forward = subprocess.run(["iptables", "-w", "10", "-S", "FORWARD"], capture_output=True,
                             text=True, check=True).stdout
    assert forward.count(f"-j {podnet.CHAIN}") == 1
    assert conf.stat().st_mtime_ns == stamp


# ------------------------------------------------------------------------------ kubelet-less

SCRATCH = podnet.PodNetwork(bridge="ikpodtest0", subnet="10.245.0.0/24", gateway="10.245.0.1",
                            service_cidr="10.112.0.0/12", chain="IMAGEKIT-PODNET-TEST",
                            name="imagekit-podnet-test")


def _sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)


def test_scratch_network_up_and_down_leaves_nothing(tmp_path: Path) -> None:
    """The network code without kubelet or containerd: two netns on a scratch bridge talk,
    nothing else is reachable, and teardown removes bridge, chain, jump and netns."""
    state = tmp_path / "podnet.json"
    conf = podnet.conflist(tmp_path / "ipam", SCRATCH)
    names = [f"cni-ikpt-{i}-{int(time.time()) % 100000}" for i in range(2)]
    try:
        podnet.ensure(state, SCRATCH)
        podnet.ensure(state, SCRATCH)   # idempotent: one jump, one set of rules
        forward = _sh("iptables", "-w", "10", "-S", "FORWARD").stdout
        assert forward.count(f"-j {SCRATCH.chain}") == 1
        results = []
        for i, name in enumerate(names):
            assert _sh("ip", "netns", "add", name).returncode == 0
            results.append(podnet.cni_chain(conf, "ADD", Path("/run/netns") / name, f"c{i}"))
        ips = [r["ips"][0]["address"].split("/")[0] for r in results]
        routes = _sh("ip", "-n", names[0], "route").stdout
        assert "default" not in routes and SCRATCH.service_cidr in routes
        ping = _sh("ip", "netns", "exec", names[0], "busybox", "ping", "-c", "1", "-W", "2",
                   ips[1])
        assert ping.returncode == 0, ping.stdout + ping.stderr
        out = _sh("ip", "netns", "exec", names[0], "busybox", "ping", "-c", "1", "-W", "1",
                  "192.0.2.1")  # no route: refused locally, nothing is sent
        assert out.returncode != 0 and "unreachable" in (out.stdout + out.stderr).lower()
        # what `down` finds when containerd is gone: the cni-* netns on this subnet, only
        assert sorted(podnet.netns_on_subnet(SCRATCH)) == [Path("/run/netns") / n
                                                           for n in sorted(names)]
        for i, name in enumerate(names):
            podnet.cni_chain(conf, "DEL", Path("/run/netns") / name, f"c{i}")
    finally:
        podnet.remove_netns([Path("/run/netns") / n for n in names])
        podnet.teardown(None, state, SCRATCH)
    assert not podnet.bridge_exists(SCRATCH.bridge)
    assert _sh("iptables", "-w", "10", "-S", SCRATCH.chain).returncode != 0
    assert f"-j {SCRATCH.chain}" not in _sh("iptables", "-w", "10", "-S", "FORWARD").stdout
    assert not any(n in _sh("ip", "netns", "list").stdout for n in names)
    assert SCRATCH.service_cidr not in _sh("ip", "route").stdout
    assert not state.exists()
    json.dumps(conf)  # the conflist is plain JSON
