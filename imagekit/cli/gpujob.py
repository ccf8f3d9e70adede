"""The many-Pod modes of `imagekit cluster gpu-preflight` (declared, with all its options, in
`imagekit.cli.cluster`):

- `--nodes N --gpus-per-node G [--pods-per-node K]`: one distributed job
  (`imagekit.gpu.job.gpu_preflight_job`, over `imagekit.cluster.gpujob`);
- `--each-node`: one independent preflight Pod per matching node (`imagekit.gpu.fleet`).

Each function checks its mode's options, calls that one flow and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from imagekit.cli.app import console, print_json, settings
from imagekit.cli.common import finish, kubeconfig_path, registry_client
from imagekit.errors import InvalidInput

if TYPE_CHECKING:
    from imagekit.kube.incluster import InCluster
    from imagekit.oci import ImageReference

#: Nodes one distributed preflight job may span (a dry run renders every Pod into evidence).
MAX_NODES = 1024


def preflight_job(*, reference: str, namespace: str, selector: list[str] | None,
                  toleration: list[str] | None, priority_class: str | None,
                  script: Path | None, submit: bool, timeout: float,
                  kubeconfig: Path | None, evidence_dir: Path | None, json_output: bool,
                  nodes: int, gpus_per_node: int | None, pods_per_node: int,
                  pod_env: list[str] | None, job_mode: str,
                  preflight_arg: list[str] | None = None, spec: Path | None = None,
                  trust_key: list[Path] | None = None, trust_policy: Path | None = None
                  ) -> None:
    """`--nodes N`: the preflight as one distributed job; its Pods, then the report (options it
    does not use were refused by the command). A NAME is resolved as everywhere else."""
    from imagekit import packaged
    from imagekit.cli import trustopts
    from imagekit.cli.app import evidence_store
    from imagekit.cli.common import images_spec
    from imagekit.cluster.gpujob import GpuJobOptions
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.manifests import GPU_TOLERATION
    from imagekit.gpu.job import gpu_preflight_job
    from imagekit.inputs import (
        count,
        dns_label,
        dns_subdomain,
        env_pairs,
        label_pairs,
        positive,
        read_text,
        tolerations,
    )
    from imagekit.names import digest_of, resolve_target

    if gpus_per_node is None:
        raise InvalidInput("--nodes needs --gpus-per-node (0 for CPU ranks on gloo)",
                           where="--gpus-per-node")
    # the single-Pod command's checks, and bounds of the job's own (before any registry,
    # cluster or evidence work; `--nodes 100000` would render 398 MB of manifests)
    count(nodes, "--nodes", minimum=1, maximum=MAX_NODES)
    count(gpus_per_node, "--gpus-per-node", minimum=0, maximum=64)
    count(pods_per_node, "--pods-per-node", minimum=1, maximum=64)
    timeout = positive(timeout, "--pod-timeout", maximum=7 * 86400)
    dns_label(namespace, "--namespace")
    if priority_class is not None:
        dns_subdomain(priority_class, "--priority-class")
    if script is not None:
        read_text(script, "preflight script")
    env = env_pairs(pod_env, "--env")
    node_selector = label_pairs(selector, "--selector")
    tolerated = tolerations(toleration) or [GPU_TOLERATION]
    trust = trustopts.load(trust_key, trust_policy)
    store = evidence_store(evidence_dir)
    ref = resolve_target(reference, spec_path=images_spec(spec), store=store,
                         remote=trustopts.name_resolver(trust, store)).reference
    client, docker_config = registry_client(ref.registry)
    with client:
        digest = digest_of(client, ref)
    options = GpuJobOptions(
        nodes=nodes, gpus_per_node=gpus_per_node, pods_per_node=pods_per_node,
        namespace=namespace, node_selector=node_selector, tolerations=tolerated,
        priority_class_name=priority_class,
        script=script or packaged.path("preflight"), script_args=list(preflight_arg or []),
        env=env, timeout_s=timeout, docker_config_dir=docker_config, mode=job_mode)
    options.validate()
    with Kube(kubeconfig_path(kubeconfig)) as kube:
        result = gpu_preflight_job(kube, ref.with_digest(digest), options, store, submit)
    if not json_output:
        run = result.run
        console.print(f"job {run.name}: {run.mode} — {run.shape.detail}")
        for pod, ip in sorted(run.pod_ips.items()):
            console.print(f"  pod {pod}: {ip}")
        if result.recorded is not None:
            console.print(f"preflight record: {result.recorded.evidence}")
    finish(result.report, json_output)


def each_node_preflight(pinned: ImageReference, *, namespace: str, selector: dict[str, str],
                        tolerations: list[dict], gpus: int, script: Path | None,
                        script_args: list[str], timeout: float, cordon: bool, taint: bool,
                        docker_config: Path | None, kubeconfig: Path | InCluster,
                        evidence_dir: Path | None, json_output: bool) -> None:
    """`--each-node`: run the fleet preflight and print the node × check table; exit 1 unless
    all PASS (2 when one broke)."""
    from rich.table import Table

    from imagekit.cluster.kube import Kube
    from imagekit.evidence import EvidenceStore
    from imagekit.gpu.fleet import FleetOptions, run_fleet
    from imagekit.results import Status

    if script is None:  # the command's default: imagekit's own GPU preflight
        from imagekit import packaged

        script = packaged.path("preflight")
    if not script.exists():
        raise InvalidInput("preflight script not found", where=str(script))
    options = FleetOptions(namespace=namespace, node_selector=selector,
                           tolerations=tolerations, gpus=gpus, script=script,
                           script_args=script_args, timeout_s=timeout, cordon_failed=cordon,
                           taint_failed=taint, docker_config_dir=docker_config,
                           manifests_dir=settings().manifests_dir)
    with Kube(kubeconfig) as kube:
        report = run_fleet(kube, pinned, options, EvidenceStore(evidence_dir))
    if json_output:
        print_json(report)
    else:
        table = Table("node", "verdict", *report.check_names, "marked", "detail",
                      title=f"GPU preflight on each node: {report.status.value}")
        for row in report.nodes:
            table.add_row(row.node, row.status.value,
                          *[report.cell(row, name) for name in report.check_names],
                          ", ".join(row.marked) or "-", row.detail[:160])
        console.print(table)
        for path in report.evidence:
            console.print(f"evidence: {path}", markup=False)
    if report.status is not Status.PASS:
        raise typer.Exit(1 if report.status is not Status.ERROR else 2)
