"""`imagekit cluster gpu-preflight --each-node`: an independent preflight Pod on every node
that matches the selector, all at once, and a node × check table.

Why: a fleet is trusted node by node. One bad node (a GPU with pending row remaps, a link at
PCIe gen 3, a driver too old for the image) must show up by name before a job lands on it, and
with `--cordon-failed` / `--taint-failed` (opt-in) it is kept out of scheduling.

What is created: one ConfigMap (the preflight script) and one Pod per node in the given
namespace, pinned to that node by its `kubernetes.io/hostname` label (the scheduler still
checks resources and taints), each precheck'd first like a single preflight Pod; all are deleted
afterwards. What is changed on the cluster, and only when asked: a node whose preflight ran and
FAILED is cordoned (spec.unschedulable) and/or tainted `imagekit.dev/gpu-preflight=failed:
NoSchedule`. Nothing else: a node that could not be judged (precheck finding, Pod that never ran,
DEFERRED) is reported, never marked, and marks are never removed by imagekit (a person clears a
node after looking at it). Runs tolerate that taint, so a marked node can be checked again.
"""

from __future__ import annotations

import json
import secrets as _secrets
import shlex
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit.cluster import admit, manifests
from imagekit.cluster.podrun import PodRun
from imagekit.cluster.pods import wait_for_pod
from imagekit.cluster.precheck import PodIntent, precheck
from imagekit.cluster.preflight import PreflightOptions, add_files, render_preflight, ship_script
from imagekit.errors import InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import BandwidthSample, GpuPreflightResult
from imagekit.gpu.record import PreflightRecord
from imagekit.kube import Kube
from imagekit.kube.access import Access
from imagekit.oci import ImageReference
from imagekit.results import CheckResult, Status, overall
from preflight.verdicts import default_baselines

TAINT_KEY = "imagekit.dev/gpu-preflight"
TAINT = {"key": TAINT_KEY, "value": "failed", "effect": "NoSchedule"}
TOLERATE_OWN_TAINT = {"key": TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
RECORD_MARK = "=====imagekit-gpu-preflight-record====="
HOSTNAME_LABEL = "kubernetes.io/hostname"


@dataclass
class FleetOptions:
    namespace: str = "imagekit"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=lambda: [manifests.GPU_TOLERATION])
    gpus: int = 8                      # nvidia.com/gpu per Pod (0 on a CPU cluster: gloo)
    nproc: int | None = None           # ranks per Pod (default: gpus, at least 1)
    script: Path | None = None         # the package gpu_checks/preflight, or a script
    script_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 900.0
    cordon_failed: bool = False
    taint_failed: bool = False
    docker_config_dir: Path | None = None
    manifests_dir: Path | None = None   # the Pod templates' folder (default the packaged one)
    #: last word on each rendered Pod (site-specific mounts; tests) — applied before precheck
    customize: Callable[[dict], None] | None = None


class NodeRow(BaseModel):
    """One node's line in the table: its verdict, each check's status, what was marked."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str
    status: Status
    stage: str                          # "precheck" | "pod" | "preflight"
    detail: str
    checks: list[CheckResult] = Field(default_factory=list)
    pod: str | None = None
    marked: list[str] = Field(default_factory=list)


class FleetReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: str
    digest: str
    status: Status
    selector: dict[str, str]
    nodes: list[NodeRow]
    check_names: list[str]
    marked: dict[str, list[str]]
    evidence: list[str]

    def cell(self, row: NodeRow, name: str) -> str:
        found = [c for c in row.checks if c.name == name]
        return found[0].status.value if found else "-"


def baseline_files(folder: Path) -> dict[str, str]:
    """The records of `folder` that can be a bandwidth baseline (PASS, no test hooks, more than
    one rank), keyed by file name: shipped beside the script so that each node's preflight
    judges its busbw against them (`--baseline /imagekit`), as it does from samples/ locally."""
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and record.get("status") == "PASS" and \
                not record.get("test_hooks") and (record.get("world_size") or 0) > 1:
            out[path.name] = path.read_text()
    return out


def select_nodes(kube: Kube, selector: dict[str, str]) -> list[dict]:
    labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or None
    return sorted(kube.resource("Node").list(label_selector=labels),
                  key=lambda n: n["metadata"]["name"])


def pod_command(nproc: int, script: list[str], args: list[str]) -> list[str]:
    """Run the preflight with one rank per GPU (`script`: ["-m", "preflight"] for the package,
    ["/imagekit/x.py"] for a script), then print its JSON record after a marker line (the
    record is the evidence; the table above it is for people). The exit status is the
    preflight's."""
    run = shlex.join(["python3", "-m", "torch.distributed.run", "--standalone",
                      f"--nproc-per-node={nproc}", *script,
                      "--json", "/tmp/preflight.json", *args])
    return ["sh", "-c", f"{run}; rc=$?; echo {RECORD_MARK}; cat /tmp/preflight.json; "
                        "exit $rc"]


def parse_pod_log(log: str) -> tuple[PreflightRecord | None, str]:
    """The preflight record printed after the marker, validated; else None and why."""
    if RECORD_MARK not in log:
        return None, "no preflight record in the Pod log (the script did not finish)"
    text = log.split(RECORD_MARK, 1)[1].strip()
    try:
        return PreflightRecord.model_validate(json.loads(text)), ""
    except (ValueError, ValidationError) as exc:
        return None, f"the Pod printed no valid preflight record: {str(exc).splitlines()[0]}"


def nodes_to_mark(rows: list[NodeRow]) -> list[str]:
    """Only nodes whose preflight ran and FAILED: a precheck finding (busy, cordoned, not
    Ready), a Pod that never ran or a DEFERRED check says nothing bad about the node's GPUs."""
    return [r.node for r in rows if r.stage == "preflight" and r.status is Status.FAIL]


#: what `mark_node` sends (read the node, then patch it): asked by access review before a run
#: that may mark nodes, as no Role `cluster rbac` prints grants it
MARKING = (Access(verb="get", resource="nodes"), Access(verb="patch", resource="nodes"))


def mark_node(kube: Kube, node: str, cordon: bool, taint: bool) -> list[str]:
    """Cordon and/or taint one node; returns what was changed (already-set marks are not)."""
    done: list[str] = []
    current = kube.resource("Node").get(node)
    spec = current.get("spec", {})
    patch: dict = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]},
                   "spec": {}}
    if cordon and not spec.get("unschedulable"):
        patch["spec"]["unschedulable"] = True
        done.append("cordoned")
    taints = list(spec.get("taints") or [])
    if taint and not any(t.get("key") == TAINT_KEY and t.get("effect") == TAINT["effect"]
                         for t in taints):
        patch["spec"]["taints"] = taints + [TAINT]  # a merge patch replaces the whole list
        done.append(f"tainted {TAINT_KEY}={TAINT['value']}:{TAINT['effect']}")
    if done:  # resourceVersion in the patch: a concurrent change answers 409, not a lost taint
        kube.resource("Node").patch(node, patch)
    return done


def run_fleet(kube: Kube, pinned: ImageReference, options: FleetOptions,
              store: EvidenceStore) -> FleetReport:
    assert pinned.digest is not None
    if options.script is None:
        raise InvalidInput("--each-node needs a preflight script (--script)")
    nodes = select_nodes(kube, options.node_selector)
    selector_text = ",".join(f"{k}={v}" for k, v in options.node_selector.items()) or "(all)"
    run_id = _secrets.token_hex(3)
    base = f"gpu-fleet-{pinned.digest.hex[:8]}-{run_id}"
    nproc = options.nproc or max(1, options.gpus)
    args = list(options.script_args)
    shipped = ship_script(options.script)
    baselines: dict[str, str] = {}
    if not any(a == "--baseline" or a.startswith("--baseline=") for a in args):
        folder = default_baselines() if shipped.package else options.script.parent / "samples"
        baselines = baseline_files(folder) if folder else {}
        if baselines:
            args += ["--baseline", "/imagekit"]
    tolerations = list(options.tolerations) + [TOLERATE_OWN_TAINT]
    rows: dict[str, NodeRow] = {}
    pods: dict[str, dict] = {}
    configmap = None
    for index, node in enumerate(nodes):
        name = node["metadata"]["name"]
        hostname = node["metadata"].get("labels", {}).get(HOSTNAME_LABEL, name)
        pod_options = PreflightOptions(
            namespace=options.namespace,
            node_selector={**options.node_selector, HOSTNAME_LABEL: hostname},
            tolerations=tolerations, gpus=options.gpus, script=options.script,
            command=pod_command(nproc, shipped.run, args),
            timeout_s=options.timeout_s, manifests_dir=options.manifests_dir)
        pod, cm = render_preflight(pinned, pod_options, f"{base}-{index}")
        cm["metadata"]["name"] = f"{base}-scripts"
        add_files(pod, cm, baselines)
        pod["spec"]["volumes"][0]["configMap"]["name"] = cm["metadata"]["name"]
        pod["metadata"]["labels"]["imagekit.dev/fleet-run"] = run_id
        pod["metadata"]["annotations"]["imagekit.dev/node"] = name
        if options.env:
            pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v}
                                                   for k, v in sorted(options.env.items())]
        if options.customize is not None:
            options.customize(pod)
        configmap = cm
        intent = PodIntent.from_pod(pod).model_copy(update={"node_name": name})
        findings = precheck(kube, intent)
        blocked = [c for c in findings if not c.status.is_pass]
        if blocked:
            rows[name] = NodeRow(node=name, status=Status.FAIL, stage="precheck",
                                 detail="not run: " + "; ".join(f"{c.name}: {c.detail}"
                                                                for c in blocked),
                                 checks=findings)
        else:
            pods[name] = pod
    evidence: list[str] = []
    run: PodRun | None = None
    try:
        if pods:
            assert configmap is not None
            # permissions (marking nodes is an administrator's, asked only when wanted), the
            # namespace and its Pod Security level: refused before anything exists
            marking = list(MARKING) if options.cordon_failed or options.taint_failed else []
            admit.prepare(kube, "gpu-preflight", options.namespace, list(pods.values()),
                          extra=marking)
            ref = ImageReference.parse(next(iter(pods.values()))["spec"]["containers"][0]
                                       ["image"])
            run = PodRun(kube, options.namespace, configmap["metadata"]["name"])
            secret = run.pull_secret(ref.registry, options.docker_config_dir)
            run.create(configmap)
            for pod in pods.values():
                if secret:
                    pod["spec"]["imagePullSecrets"] = [{"name": secret}]
                run.start(pod)
            with ThreadPoolExecutor(max_workers=min(16, len(pods))) as pool:
                outcomes = dict(zip(pods, pool.map(
                    lambda item: _outcome(kube, options, item[0], item[1]), pods.items()),
                    strict=True))
            for node_name, (row, log, record) in outcomes.items():
                rows[node_name] = row
                evidence.append(_evidence(store, pinned, options, row, log, record))
    finally:
        if run is not None:
            run.cleanup(timeout=120)   # what it could not delete: the Pods' own rows say why
    marked: dict[str, list[str]] = {}
    if options.cordon_failed or options.taint_failed:
        for failed in nodes_to_mark(list(rows.values())):
            done = mark_node(kube, failed, options.cordon_failed, options.taint_failed)
            if done:
                marked[failed] = done
                rows[failed] = rows[failed].model_copy(update={"marked": done})
    ordered = [rows[n["metadata"]["name"]] for n in nodes]
    names: list[str] = []
    for row in ordered:
        if row.stage == "preflight":
            names.extend(c.name for c in row.checks if c.name not in names)
    status = overall([CheckResult(name=r.node, status=r.status) for r in ordered]) \
        if ordered else Status.FAIL
    if not ordered:
        ordered = []
    return FleetReport(subject=f"{pinned} on nodes {selector_text}", digest=str(pinned.digest),
                       status=status, selector=options.node_selector, nodes=ordered,
                       check_names=names, marked=marked, evidence=evidence)


def _outcome(kube: Kube, options: FleetOptions, node: str, pod: dict
             ) -> tuple[NodeRow, str, PreflightRecord | None]:
    name = pod["metadata"]["name"]
    started = time.monotonic()
    outcome = wait_for_pod(kube, options.namespace, name, timeout=options.timeout_s)
    log = kube.pod_logs(options.namespace, name)
    why = None  # the Pod never gave the preflight a run: an ERROR of the Pod, not the node
    if outcome.stuck_reason:
        why = f"stuck in {outcome.stuck_reason}: {outcome.stuck_message or ''}"
    elif outcome.timed_out:
        why = f"no outcome after {options.timeout_s:.0f}s"
    elif outcome.refusal:
        why = outcome.refusal
    if why is not None:
        return NodeRow(node=node, status=Status.ERROR, stage="pod", detail=why, pod=name), \
            log, None
    record, why = parse_pod_log(log)
    if record is None:
        return NodeRow(node=node, status=Status.ERROR, stage="pod", pod=name,
                       detail=f"Pod {outcome.phase}; {why}"), log, None
    failing = [c for c in record.checks if c.status is not Status.PASS]
    detail = (f"{record.status.value} in {time.monotonic() - started:.1f}s; "
              + ("; ".join(f"{c.name}: {c.detail}" for c in failing[:3]) if failing else
                 f"{len(record.checks)} checks PASS"))
    return NodeRow(node=node, status=record.status, stage="preflight", detail=detail,
                   checks=list(record.checks), pod=name), log, record


def _evidence(store: EvidenceStore, pinned: ImageReference, options: FleetOptions,
              row: NodeRow, log: str, record: PreflightRecord | None) -> str:
    assert pinned.digest is not None
    with store.attempt(pinned.digest, "gpu-preflight", reference=str(pinned),
                       namespace=options.namespace, pod=row.pod, node=row.node,
                       fleet=True) as attempt:
        attempt.write_text("pod.log", log)
        if record is not None:
            attempt.write_json("preflight.json", record.model_dump(mode="json", by_alias=True))
        attempt.write_result(GpuPreflightResult(
            world_size=record.world_size if record else None,
            backend=record.backend if record else None,
            gpus=record.gpu_names if record else [],
            hostname=row.node,
            sizes=[BandwidthSample(bytes=s.bytes, algbw_GBps=s.algbw_GBps,
                                   busbw_GBps=s.busbw_GBps)
                   for s in (record.bandwidth.sizes if record and record.bandwidth else [])],
            reference=str(pinned), namespace=options.namespace, pod=row.pod, submitted=True))
        for check in row.checks or [CheckResult(name="preflight", status=row.status,
                                                detail=row.detail)]:
            attempt.add_check(check)
        attempt.finish(status=row.status, summary=f"node {row.node}: {row.detail}"[:500])
        return str(attempt.path)
