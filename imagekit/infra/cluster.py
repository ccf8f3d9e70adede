"""The local single-node Kubernetes (`imagekit infra up --cluster`): build, start, stop, status.

A real cluster, not a fake: kube-apiserver, kube-controller-manager, kube-scheduler and kubelet
v1.20.2 built from Debian 12's `kubernetes` source package (`k8s/build.sh`, cached in
/opt/k8s/bin — a second run skips), etcd from Debian, containerd + runc from Debian. Upstream
admission stays on, so a Pod with `preemptionPolicy: Never` and no matching PriorityClass gets
403 exactly as on a production cluster.

Every daemon is started and stopped through `imagekit.infra.processes` (PID + kernel start time
+ command line), never by name. Constraints of this kind of machine (each found the hard way,
see shared/design/local-cluster/README.md):

1. negative oom_score_adj is refused: containerd runs runc through `k8s/runc-wrap.sh`, which
   clamps it to 0;
2. the Pod network is a bridge on this machine only (`imagekit.infra.podnet`): Debian's CNI
   plugins give each Pod an address on `ikpod0` (10.244.0.0/24) and no default route;
   kube-proxy (iptables mode, built from the same source tree) serves ClusterIP Services
   (10.96.0.0/12); nothing is forwarded off the machine;
3. the kubelet refuses a loopback --node-ip, so the node is *named* 127.0.0.1;
4. containerd pulls only from the loopback registries: one hosts.toml per registry (settings at
   top level AND an empty `[host]` table, else containerd 1.6.20 silently falls back to plain
   HTTP without the CA); every other pull goes to a dead proxy on 127.0.0.1:9. Credentials are
   not configured here: Pods bring them as imagePullSecrets, as on a real cluster.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import ssl
import subprocess
import time
import tomllib
from pathlib import Path
from typing import Any

import httpx
import psutil
import tomli_w
import yaml

from imagekit.errors import InfraError, PortTaken
from imagekit.infra import podnet, processes
from imagekit.infra.pki import write_cluster_pki
from imagekit.infra.state import REGISTRY_LAYOUT, ComponentStatus, InfraState, StatePaths
from imagekit.progress import current as current_progress
from imagekit.progress import run_logged

NAME = "cluster"
NODE_NAME = "127.0.0.1"
#: Where the Kubernetes binaries are built unless the caller names another folder (the CLI
#: passes IMAGEKIT_K8S_BIN, imagekit.settings); every function that runs one takes `k8s_bin`.
DEFAULT_K8S_BIN = Path("/opt/k8s/bin")
SCRIPTS = Path(__file__).absolute().parent / "k8s"
API_PORT = 6443
ETCD_PORT, ETCD_PEER_PORT = 2379, 2380
#: Node label and taint of the single node: GPU Pods need the label in their nodeSelector and
#: must tolerate the taint, like a tainted GPU pool on a production cluster.
NODE_LABELS = {"nvidia.com/gpu.present": "true"}
NODE_TAINT = "nvidia.com/gpu=present:NoSchedule"
#: Images that exist without any registry (imported into containerd at start).
PAUSE_IMAGE = "registry.k8s.io/pause:3.6"
BUSYBOX_IMAGE = "docker.io/library/busybox:1.36"
BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet",
            "kube-proxy", "pause")
#: Runtime packages (the build's own toolchain is installed by k8s/build.sh, only when it builds).
PACKAGES = ["etcd-server", "containerd", "runc", "containernetworking-plugins", "busybox-static",
            "openssl", "iptables", "iproute2"]
#: Tracked process names, in start order (stopped in reverse).
DAEMONS = ("k8s-etcd", "k8s-apiserver", "k8s-controller-manager", "k8s-scheduler",
           "k8s-kube-proxy", "k8s-containerd", "k8s-kubelet")


class ClusterPaths:
    """Files of the cluster, all under <state dir>/k8s."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "k8s"
        self.pki = self.root / "pki"
        self.kubeconfig = self.root / "admin.kubeconfig"
        self.tokens = self.root / "tokens.csv"
        self.etcd_data = self.root / "etcd-data"
        self.ctrd = self.root / "ctrd"
        self.kubelet = self.root / "kubelet"
        self.logs = state_dir / "logs"

    @property
    def containerd_sock(self) -> Path:
        return self.ctrd / "containerd.sock"

    @property
    def certs_d(self) -> Path:
        return self.ctrd / "certs.d"

    @property
    def podnet_state(self) -> Path:
        """What the Pod network changed on the host and must put back (route_localnet)."""
        return self.root / "podnet.json"


def _paths(state: InfraState) -> ClusterPaths:
    return ClusterPaths(state.state_dir)


def _sp(state: InfraState) -> StatePaths:
    return StatePaths(state.state_dir)


def _run(argv: list[str], what: str, log: Path | None = None, env: dict[str, str] | None = None,
         timeout: float | None = None, step: str = "cluster", stage_of=None) -> None:
    """Run one setup command with its output appended to `log`; a phase of the command line's
    progress (elapsed time, heartbeat with the log's latest line while it is silent)."""
    if log is None:
        log = Path(os.devnull)
    code, timed_out = run_logged(argv, log, step, what=what, stage_of=stage_of, env=env,
                                 timeout=timeout)
    where = str(log) if str(log) != os.devnull else argv[0]
    if timed_out:
        raise InfraError(f"{what} timed out", where=where)
    if code != 0:
        raise InfraError(f"{what} failed (exit {code})", where=where)


_PHASE_LINE = re.compile(r"^k8s build: (?P<what>.+?) \((?P<s>\d+) s\)$")
_GO_TARGETS = re.compile(r"^\+\+\+ \[\d{4} [\d:]{8}\] Building go targets for (?P<plat>\S+):")


class K8sBuildStages:
    """build.sh's output → stages: its own `k8s build: <phase> (N s)` lines (apt, source
    download, `compiling <binary>` per binary), and the kube Makefile's `+++ [MMDD hh:mm:ss]
    Building go targets for linux/amd64:` blocks, named by the first target the block lists:
    `code generator <tool>` (the vendored generators, first make only) or `go build <binary>`
    (the compile itself; the other targets of the block become its detail)."""

    def __init__(self) -> None:
        self.pending = False

    def __call__(self, line: str) -> str | None:
        if match := _PHASE_LINE.match(line):
            self.pending = False
            what = match["what"]
            return None if what.startswith("installed ") else what
        if _GO_TARGETS.match(line):
            self.pending = True
            return None
        if self.pending and line.startswith("    "):
            self.pending = False
            target = line.strip()
            kind = "code generator" if target.startswith("./vendor/") else "go build"
            return f"{kind} {target.rsplit('/', 1)[-1]}"
        self.pending = False
        return None


# ------------------------------------------------------------------------------ build

#: the Kubernetes build's CPU priority (`nice`): alone (make test's `infra up`) it runs as
#: fast; beside the rehearsal's stand-ins and images' build it takes the CPU they leave
BUILD_NICENESS = 10


def binaries_present(k8s_bin: Path = DEFAULT_K8S_BIN) -> bool:
    return all((k8s_bin / b).is_file() and os.access(k8s_bin / b, os.X_OK) for b in BINARIES)


def ensure_built(log: Path, k8s_bin: Path = DEFAULT_K8S_BIN, mirror: str | None = None) -> None:
    """Build the Kubernetes binaries once (~5 min cold on 2 cores); cached in k8s_bin after.

    The runtime packages are installed even when the binaries are cached (a machine may have
    the cache but not the packages)."""
    from imagekit.infra.apt import debian_mirror, ensure_packages

    ensure_packages(PACKAGES, log=log)
    if binaries_present(k8s_bin):
        return
    import sys
    sys.stderr.write(f"imagekit: building Kubernetes v1.20.2 from Debian source (first time "
                     f"only, ~5–20 min on 2 cores); log: {log}\n")
    sys.stderr.flush()
    _run(["nice", "-n", str(BUILD_NICENESS), "bash", str(SCRIPTS / "build.sh")], "starting",
         log=log, step="k8s build",
         env={"K8S_BIN": str(k8s_bin), "DEBIAN_MIRROR": debian_mirror(mirror)},
         stage_of=K8sBuildStages())
    if not binaries_present(k8s_bin):
        raise InfraError("Kubernetes build finished but binaries are missing", where=str(k8s_bin))


# ------------------------------------------------------------------------------ PKI, kubeconfig

def _ensure_pki(p: ClusterPaths) -> None:
    """Cluster CA, apiserver cert, kubelet-client cert, service-account key (`cryptography`,
    imagekit.infra.pki.write_cluster_pki), admin token.

    Separate from the registries' CA on purpose: the cluster's trust is its own."""
    if (p.pki / "sa.pub").is_file() and p.kubeconfig.is_file() and p.tokens.is_file():
        return
    p.pki.mkdir(parents=True, exist_ok=True)
    os.chmod(p.root, 0o700)
    write_cluster_pki(p.pki)
    token = secrets.token_hex(16)
    _write_private(p.tokens, f"{token},admin,admin,system:masters\n")
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "imagekit", "cluster": {
            "server": f"https://127.0.0.1:{API_PORT}",
            "certificate-authority": str(p.pki / "ca.crt")}}],
        "users": [{"name": "admin", "user": {"token": token}}],
        "contexts": [{"name": "imagekit", "context": {"cluster": "imagekit", "user": "admin"}}],
        "current-context": "imagekit",
    }
    _write_private(p.kubeconfig, json.dumps(kubeconfig, indent=2) + "\n")


def _write_private(path: Path, text: str) -> None:
    """Secrets (token, kubeconfig) are written 0600 from the start, never world-readable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(path, 0o600)


def _admin_token(p: ClusterPaths) -> str:
    return p.tokens.read_text().split(",", 1)[0].strip()


def _api_client(p: ClusterPaths) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(p.pki / "ca.crt"))
    return httpx.Client(base_url=f"https://127.0.0.1:{API_PORT}", verify=ctx, timeout=5.0,
                        headers={"Authorization": f"Bearer {_admin_token(p)}"}, trust_env=False)


def _api_get(p: ClusterPaths, path: str) -> httpx.Response | None:
    try:
        with _api_client(p) as client:
            return client.get(path)
    except (httpx.HTTPError, OSError, ssl.SSLError):
        return None


# ------------------------------------------------------------------------------ containerd config

def containerd_config(d: Path) -> dict[str, Any]:
    """containerd's config.toml (version 2) for the cluster rooted at `d` (written by tomli-w)."""
    cri: dict[str, Any] = {
        "sandbox_image": PAUSE_IMAGE,
        "stream_server_address": "127.0.0.1",
        "stream_server_port": "0",
        "containerd": {
            "snapshotter": "overlayfs",
            "default_runtime_name": "runc",
            "runtimes": {"runc": {
                "runtime_type": "io.containerd.runc.v2",
                "options": {"SystemdCgroup": False, "BinaryName": f"{d}/runc-wrap"}}},
        },
        "cni": {"bin_dir": f"{d}/cni-bin", "conf_dir": f"{d}/cni-conf"},
        "registry": {"config_path": f"{d}/certs.d"},
    }
    return {
        "version": 2,
        "root": f"{d}/root",
        "state": f"{d}/state",
        "grpc": {"address": f"{d}/containerd.sock"},
        "ttrpc": {"address": f"{d}/containerd.sock.ttrpc"},
        "plugins": {"io.containerd.grpc.v1.cri": cri,
                    "io.containerd.internal.v1.opt": {"path": f"{d}/opt"}},
    }


def kubelet_config_doc(pki: Path) -> dict[str, Any]:
    """The kubelet's KubeletConfiguration (written by yaml.safe_dump)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": f"{pki}/ca.crt"}},
        "authorization": {"mode": "AlwaysAllow"},
        # Absolute floors, not percentages: on a large shared disk 1 % is gigabytes, and a
        # node under DiskPressure refuses every new Pod at admission.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "512Mi",
                         "imagefs.available": "512Mi"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # ConfigMap updates reach mounted volumes at the Pod's next sync: 10 s instead of 1 min,
        # so the ConfigMap-switch regression test does not wait a minute per update.
        "syncFrequency": "10s",
        "clusterDomain": "cluster.local",
    }


def _write_containerd_config(p: ClusterPaths, state: InfraState) -> str:
    d = p.ctrd
    for sub in ("cni-bin", "cni-conf", "certs.d", "root", "state", "opt"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    shutil.copy2(SCRIPTS / "runc-wrap.sh", d / "runc-wrap")
    # The CNI network is not part of config.toml (nor of the fingerprint): containerd watches
    # conf_dir and uses a new network for new sandboxes without a restart.
    podnet.install_cni(d / "cni-bin", d / "cni-conf", d / "cni-ipam")
    config = _ensure_toml(d / "config.toml", containerd_config(d))
    hosts = write_registry_hosts(p.certs_d, state)
    # The fingerprint (a change restarts containerd and the kubelet) is of the files' bytes,
    # and a file is rewritten only when what it says changes: so a file another layout wrote
    # (the earlier f-string templates, another tomli-w) with the same meaning is kept,
    # and so is the fingerprint of the daemons running on it.
    return hashlib.sha256((config + hosts).encode()).hexdigest()[:16]


def _ensure_toml(path: Path, doc: dict[str, Any]) -> str:
    """Write `doc` to `path` (tomli-w) unless the file there already says exactly that (same
    document, whatever its layout); the file's text."""
    try:
        text = path.read_text()
        if tomllib.loads(text) == doc:
            return text
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    text = tomli_w.dumps(doc)
    path.write_text(text)
    return text


def registry_hosts_toml(address: str, scheme: str, ca: Path | None) -> str:
    """One registry's hosts.toml: settings at top level (they apply to `server`) plus an EMPTY
    `[host]` table. Without any [host] tree containerd 1.6.20 rejects the file ("invalid `host`
    tree") and silently uses its loopback default (plain HTTP, no CA); a `[host."https://…"]`
    section instead would be tried first and `server` retried WITHOUT its CA, so a wrong digest
    would surface as an x509 error instead of "not found"."""
    doc: dict[str, Any] = {"server": f"{scheme}://{address}", "capabilities": ["pull", "resolve"]}
    if ca is not None:
        doc["ca"] = str(ca)
    doc["host"] = {}
    return tomli_w.dumps(doc)


def write_registry_hosts(certs_d: Path, state: InfraState) -> str:
    """hosts.toml for every loopback registry in the infra state (rewritten only when what it
    says changes); returns their texts and CAs joined, an input of the config fingerprint."""
    texts = []
    # the cluster pulls from the contract's three registries; the referrers-API registry (a
    # hop for attestations, manifests in memory) is not one of its mirrors
    pulled = [e for name, e in state.registries.items() if name in REGISTRY_LAYOUT]
    for endpoint in sorted(pulled, key=lambda e: e.address):
        directory = certs_d / endpoint.address
        directory.mkdir(parents=True, exist_ok=True)
        ca = None
        if endpoint.scheme == "https":
            source = endpoint.ca_file or state.ca_file
            ca = directory / "ca.crt"
            shutil.copy2(source, ca)
        text = _ensure_toml(directory / "hosts.toml", tomllib.loads(
            registry_hosts_toml(endpoint.address, endpoint.scheme, ca)))
        texts.append(text + (ca.read_text() if ca else ""))
    return "".join(texts)


# ------------------------------------------------------------------------------ start

def _wait(what: str, predicate, timeout: float, record: processes.TrackedProcess | None = None,
          interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    with current_progress().phase("cluster", f"waiting for {what}"):
        while time.monotonic() < deadline:
            if predicate():
                return
            if record is not None and not processes.is_alive(record):
                raise InfraError(f"{record.name} exited while waiting for {what}; see its log",
                                 where=str(record.log_file))
            time.sleep(interval)
        raise InfraError(f"timed out after {timeout:.0f}s waiting for {what}",
                         where=str(record.log_file) if record else None)


def _fp(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def _start(name: str, argv: list[str], p: ClusterPaths, state: InfraState,
           env: dict[str, str] | None = None, extra_fp: str = "") -> processes.TrackedProcess:
    return processes.start_tracked(name, argv, p.logs / f"{name}.log", env=env,
                                   fingerprint=_fp(argv, extra_fp), cwd=p.root,
                                   paths=_sp(state))


def _node_ready(p: ClusterPaths) -> bool:
    response = _api_get(p, f"/api/v1/nodes/{NODE_NAME}")
    if response is None or response.status_code != 200:
        return False
    conditions = response.json().get("status", {}).get("conditions", [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _default_sa_ready(p: ClusterPaths) -> bool:
    response = _api_get(p, "/api/v1/namespaces/default/serviceaccounts/default")
    return response is not None and response.status_code == 200 and \
        bool(response.json().get("secrets"))


def _import_images(p: ClusterPaths, k8s_bin: Path) -> None:
    """pause (k8s' pause.c, static) and busybox (Debian busybox-static): images that exist
    without any registry, so the sandbox and the tests' helper Pods never pull from outside."""
    ctr = ["ctr", "-a", str(p.containerd_sock), "-n", "k8s.io"]
    listed = subprocess.run([*ctr, "images", "ls", "-q"], capture_output=True, text=True,
                            check=False).stdout.split()
    if PAUSE_IMAGE in listed and BUSYBOX_IMAGE in listed:
        return
    log = p.logs / "k8s-images.log"
    _run(["python3", str(SCRIPTS / "mkimage.py"), str(k8s_bin / "pause"), str(p.ctrd)],
         "packing pause/busybox images", log=log)
    for tar in ("pause.tar", "busybox.tar"):
        _run([*ctr, "images", "import", str(p.ctrd / tar)], f"importing {tar}", log=log)


def up(state: InfraState, k8s_bin: Path = DEFAULT_K8S_BIN,
       mirror: str | None = None) -> ComponentStatus:
    """Build (cached) and start the cluster; idempotent: running daemons are kept."""
    p = _paths(state)
    p.root.mkdir(parents=True, exist_ok=True)
    p.logs.mkdir(parents=True, exist_ok=True)
    ensure_built(p.logs / "k8s-build.log", k8s_bin, mirror)
    _ensure_pki(p)
    pki = str(p.pki)
    if not processes.port_open("127.0.0.1", ETCD_PORT) or processes.running("k8s-etcd", _sp(state)):
        etcd = _start("k8s-etcd", [
            shutil.which("etcd") or "/usr/bin/etcd", "--name", "default",
            "--data-dir", str(p.etcd_data),
            "--listen-client-urls", f"http://127.0.0.1:{ETCD_PORT}",
            "--advertise-client-urls", f"http://127.0.0.1:{ETCD_PORT}",
            "--listen-peer-urls", f"http://127.0.0.1:{ETCD_PEER_PORT}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{ETCD_PEER_PORT}",
            "--initial-cluster", f"default=http://127.0.0.1:{ETCD_PEER_PORT}"], p, state)
        processes.wait_for_port("127.0.0.1", ETCD_PORT, 60, etcd)
    else:
        _foreign_port(ETCD_PORT, "etcd")
    # Default admission plugins stay on (Priority, ServiceAccount, DefaultTolerationSeconds…).
    # TaintNodesByCondition is off because the node-lifecycle controller that lifts its
    # not-ready taint is off too (there is one node and it is this machine).
    api = _start("k8s-apiserver", [
        str(k8s_bin / "kube-apiserver"),
        f"--etcd-servers=http://127.0.0.1:{ETCD_PORT}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={API_PORT}", "--insecure-port=0",
        f"--tls-cert-file={pki}/apiserver.crt", f"--tls-private-key-file={pki}/apiserver.key",
        f"--cert-dir={pki}", f"--client-ca-file={pki}/ca.crt",
        f"--token-auth-file={p.tokens}", "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki}/sa.pub",
        f"--service-account-signing-key-file={pki}/sa.key",
        "--service-cluster-ip-range=10.96.0.0/12", "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        f"--kubelet-client-certificate={pki}/kubelet-client.crt",
        f"--kubelet-client-key={pki}/kubelet-client.key",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        "--enable-admission-plugins=NodeRestriction",
        "--disable-admission-plugins=TaintNodesByCondition"], p, state)

    def api_ready() -> bool:
        response = _api_get(p, "/readyz")
        return response is not None and response.status_code == 200

    _wait("kube-apiserver /readyz", api_ready, 120, api)
    kc = str(p.kubeconfig)
    _start("k8s-controller-manager", [
        str(k8s_bin / "kube-controller-manager"), f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1", "--port=0", "--secure-port=10257", "--leader-elect=false",
        f"--service-account-private-key-file={pki}/sa.key", f"--root-ca-file={pki}/ca.crt",
        "--controllers=*,-nodelifecycle"], p, state)
    _start("k8s-scheduler", [
        str(k8s_bin / "kube-scheduler"), f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1", "--port=0", "--secure-port=10259",
        "--leader-elect=false"], p, state)
    _wait("the default ServiceAccount token", lambda: _default_sa_ready(p), 90)
    podnet.ensure(p.podnet_state)
    proxy = _start("k8s-kube-proxy", podnet.kube_proxy_argv(k8s_bin / "kube-proxy",
                                                           p.kubeconfig, NODE_NAME), p, state)
    _wait("kube-proxy's iptables rules", podnet.kube_proxy_synced, 60, proxy)
    podnet.ensure_isolation()   # again: the isolation jump stays first, ahead of kube-proxy's

    config_fp = _write_containerd_config(p, state)
    ctrd = _start("k8s-containerd", [shutil.which("containerd") or "/usr/bin/containerd",
                                     "--config", str(p.ctrd / "config.toml")], p, state,
                  env={"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
                       "NO_PROXY": "127.0.0.1,localhost"}, extra_fp=config_fp)
    _wait("containerd socket", p.containerd_sock.exists, 30, ctrd)
    _import_images(p, k8s_bin)
    kubelet_config = p.root / "kubelet-config.yaml"
    kubelet_config.write_text(yaml.safe_dump(kubelet_config_doc(p.pki), sort_keys=False))
    p.kubelet.mkdir(parents=True, exist_ok=True)
    labels = ",".join(f"{k}={v}" for k, v in NODE_LABELS.items())
    kubelet = _start("k8s-kubelet", [
        str(k8s_bin / "kubelet"), f"--config={kubelet_config}", f"--kubeconfig={kc}",
        "--container-runtime=remote",
        f"--container-runtime-endpoint=unix://{p.containerd_sock}",
        f"--hostname-override={NODE_NAME}", f"--root-dir={p.kubelet}",
        f"--cert-dir={p.kubelet}/pki", f"--node-labels={labels}",
        f"--register-with-taints={NODE_TAINT}"], p, state, extra_fp=config_fp)
    _wait(f"node {NODE_NAME} Ready", lambda: _node_ready(p), 180, kubelet, interval=0.5)
    return status(state)


def _foreign_port(port: int, what: str) -> None:
    holders = processes.port_holders(port)
    who = ", ".join(f"pid {pid} {' '.join(cmd)[:60]}" for pid, cmd in holders) or "unknown"
    raise PortTaken(f"port {port} ({what}) is held by a process imagekit did not start: {who}")


# ------------------------------------------------------------------------------ stop

def down(state: InfraState, k8s_bin: Path = DEFAULT_K8S_BIN) -> None:
    """Stop what `up` started (tracked PIDs only), unmount below the cluster dir, drop the
    runtime state (etcd data, kubelet and containerd dirs). PKI and kubeconfig are kept so
    the recorded kubeconfig stays valid for the next `up`."""
    p = _paths(state)
    sp = _sp(state)
    processes.stop_tracked("k8s-kubelet", paths=sp)
    netns: list[Path] = []
    if processes.running("k8s-containerd", sp) is not None:
        ctr = ["ctr", "-a", str(p.containerd_sock), "-n", "k8s.io"]
        netns = podnet.sandbox_netns(ctr)
        tasks = subprocess.run([*ctr, "tasks", "ls", "-q"], capture_output=True, text=True,
                               check=False, timeout=30).stdout.split()
        for task in tasks:
            subprocess.run([*ctr, "tasks", "kill", "-s", "SIGKILL", task], capture_output=True,
                           check=False, timeout=30)
        if tasks:
            time.sleep(1)
        for task in tasks:
            subprocess.run([*ctr, "tasks", "rm", "-f", task], capture_output=True, check=False,
                           timeout=30)
        for container in subprocess.run([*ctr, "containers", "ls", "-q"], capture_output=True,
                                        text=True, check=False, timeout=30).stdout.split():
            subprocess.run([*ctr, "containers", "rm", container], capture_output=True,
                           check=False, timeout=30)
    for name in reversed(DAEMONS[:-1]):
        processes.stop_tracked(name, paths=sp)
    podnet.remove_netns(netns + podnet.netns_on_subnet())
    podnet.teardown(k8s_bin / "kube-proxy", p.podnet_state)
    _unmount_below(p.root)
    for directory in (p.etcd_data, p.kubelet, p.ctrd):
        shutil.rmtree(directory, ignore_errors=True)


def _unmount_below(root: Path) -> None:
    prefix = str(root) + "/"
    mounts = [part.mountpoint for part in psutil.disk_partitions(all=True)
              if part.mountpoint.startswith(prefix)]
    for mount in sorted(mounts, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


# ------------------------------------------------------------------------------ status

def kubectl_for(k8s_bin: Path = DEFAULT_K8S_BIN) -> Path | None:
    """A kubectl for this cluster: one built beside its binaries, else the first on PATH (the
    build makes none: Debian's kubernetes-client package is the same version, 1.20)."""
    built = k8s_bin / "kubectl"
    if built.is_file() and os.access(built, os.X_OK):
        return built
    found = shutil.which("kubectl")
    return Path(found) if found else None


def status(state: InfraState, k8s_bin: Path = DEFAULT_K8S_BIN) -> ComponentStatus:
    p = _paths(state)
    sp = _sp(state)
    down_ = [name for name in DAEMONS if processes.running(name, sp) is None]
    api = processes.running("k8s-apiserver", sp)
    fix = "imagekit infra up --cluster"
    if not binaries_present(k8s_bin):
        return ComponentStatus(name=NAME, running=False, detail=f"not built (no binaries in "
                               f"{k8s_bin}); the first build takes ~5 min", fix=fix)
    if down_:
        return ComponentStatus(name=NAME, running=False, pid=api.pid if api else None,
                               ours=api is not None,
                               kubeconfig=p.kubeconfig if p.kubeconfig.is_file() else None,
                               detail=f"not running: {', '.join(down_)}", fix=fix)
    ready = _node_ready(p)
    return ComponentStatus(
        name=NAME, running=ready, address=f"127.0.0.1:{API_PORT}", pid=api.pid if api else None,
        ours=True, kubeconfig=p.kubeconfig, kubectl=kubectl_for(k8s_bin),
        detail=f"Kubernetes v1.20.2, node {NODE_NAME} " + ("Ready" if ready else "NOT Ready")
        + f"; Pod network {podnet.POD_SUBNET} on {podnet.BRIDGE}, Services {podnet.SERVICE_CIDR}"
        + (" (bridge missing)" if not podnet.bridge_exists() else ""),
        fix=None if ready else fix)
