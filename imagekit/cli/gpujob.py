"""`imagekit cluster gpu-preflight REF --nodes N --gpus-per-node G [--pods-per-node K]`.

The single-Pod `cluster gpu-preflight` lives in `imagekit.cli.cluster`; this module adds the
many-Pod options to that same command without editing it: it wraps the registered callback
and extends its signature, so whatever options the single-Pod command gains keep working
unchanged (they are passed through untouched when `--nodes` is absent). With `--nodes` the run
is a distributed job (`imagekit.cluster.gpujob`, verdict in `imagekit.gpu.job`).
"""

from __future__ import annotations

import functools
import inspect

import typer

from imagekit.cli import cluster as cluster_cli
from imagekit.cli.app import console, guarded
from imagekit.errors import InvalidInput

COMMAND = "gpu-preflight"

_EXTRA = {
    "nodes": typer.Option(None, "--nodes", help="Run as a distributed job over N nodes "
                          "(one torchrun world; c10d rendezvous through a Service)."),
    "gpus_per_node": typer.Option(None, "--gpus-per-node", help="With --nodes: GPUs per node "
                                  "(0: CPU ranks on gloo, one per Pod)."),
    "pods_per_node": typer.Option(1, "--pods-per-node", help="With --nodes: Pods per node "
                                  "(>1 lets one node take several; GPUs are split evenly)."),
    "pod_env": typer.Option(None, "--env", help="With --nodes: KEY=VALUE for every Pod "
                            "(repeatable), e.g. NCCL_NVLS_ENABLE=0."),
    "job_mode": typer.Option("auto", "--job-mode", help="With --nodes: auto (Indexed Job when "
                             "the server keeps completionMode and has cluster DNS, else one "
                             "Job per index), indexed-job or job-per-index."),
}

_TYPES = {"nodes": int, "gpus_per_node": int, "pods_per_node": int, "pod_env": list[str],
          "job_mode": str}


#: Nodes one distributed preflight job may span (a dry run renders every Pod into evidence).
MAX_NODES = 1024


def _run_job(*, reference: str, namespace: str, selector, toleration, priority_class,
             script, submit: bool, timeout: float, kubeconfig, evidence_dir, json_output: bool,
             nodes: int, gpus_per_node: int | None, pods_per_node: int,
             pod_env: list[str] | None, job_mode: str, preflight_arg: list[str] | None = None,
             each_node: bool = False, **_ignored) -> None:
    from imagekit import assets
    from imagekit.cluster.gpujob import GpuJobOptions
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.manifests import GPU_TOLERATION
    from imagekit.evidence import EvidenceStore
    from imagekit.gpu.job import gpu_preflight_job
    from imagekit.oci import ImageReference

    if each_node:
        raise InvalidInput("--nodes (one distributed job) and --each-node (one independent "
                           "preflight per node) exclude each other", where="--each-node")
    if gpus_per_node is None:
        raise InvalidInput("--nodes needs --gpus-per-node (0 for CPU ranks on gloo)",
                           where="--gpus-per-node")
    # the single-Pod command's checks, and bounds of the job's own (before any registry,
    # cluster or evidence work; `--nodes 100000` would render 398 MB of manifests)
    from imagekit.inputs import count, dns_label, dns_subdomain, env_pairs, positive, read_text

    count(nodes, "--nodes", minimum=1, maximum=MAX_NODES)
    count(gpus_per_node, "--gpus-per-node", minimum=0, maximum=64)
    count(pods_per_node, "--pods-per-node", minimum=1, maximum=64)
    timeout = positive(timeout, "--timeout", maximum=7 * 86400)
    dns_label(namespace, "--namespace")
    if priority_class is not None:
        dns_subdomain(priority_class, "--priority-class")
    if script is not None:
        read_text(script, "preflight script")
    env = env_pairs(pod_env, "--env")
    node_selector = cluster_cli._parse_selector(selector)
    tolerations = cluster_cli._parse_tolerations(toleration) or [GPU_TOLERATION]
    ref = ImageReference.parse(reference)
    client, docker_config = cluster_cli._registry_client(ref.registry)
    with client:
        digest = ref.digest or client.get_manifest(ref.repository, ref.tag or "latest").digest
    args = list(preflight_arg or [])
    options = GpuJobOptions(
        nodes=nodes, gpus_per_node=gpus_per_node, pods_per_node=pods_per_node,
        namespace=namespace, node_selector=node_selector, tolerations=tolerations,
        priority_class_name=priority_class,
        script=script or assets.path("preflight"), script_args=args, env=env,
        timeout_s=timeout, docker_config_dir=docker_config, mode=job_mode)
    options.validate()
    with Kube(cluster_cli._kubeconfig(kubeconfig)) as kube:
        result = gpu_preflight_job(kube, ref.with_digest(digest), options,
                                   EvidenceStore(evidence_dir), submit)
    if not json_output:
        run = result.run
        console.print(f"job {run.name}: {run.mode} — {run.shape.detail}")
        for pod, ip in sorted(run.pod_ips.items()):
            console.print(f"  pod {pod}: {ip}")
        if result.recorded is not None:
            console.print(f"preflight record: {result.recorded.evidence}")
    cluster_cli._finish(result.report, json_output)


def _install() -> None:
    info = next((c for c in cluster_cli.cluster_app.registered_commands
                 if c.name == COMMAND), None)
    if info is None or getattr(info.callback, "_imagekit_gpujob", False):
        return
    original = info.callback
    base = inspect.signature(original)
    params = list(base.parameters.values())
    names = {p.name for p in params}
    for name, default in _EXTRA.items():
        if name not in names:
            params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                            default=default, annotation=_TYPES[name]))

    @functools.wraps(original)
    def callback(**kwargs):
        mine = {name: kwargs.pop(name, None) for name in _EXTRA}
        if mine["nodes"] is None:
            given = [f"--{n.replace('_', '-')}"
                     for n in ("gpus_per_node", "pod_env")
                     if mine[n] is not None]
            if given or (mine["pods_per_node"] not in (None, 1)) or \
                    mine["job_mode"] not in (None, "auto"):
                return guarded(_refuse)(given or ["--pods-per-node/--job-mode"])
            return original(**kwargs)
        return guarded(_run_job)(**kwargs, **mine)

    callback.__signature__ = base.replace(parameters=params)  # type: ignore[attr-defined]
    callback.__annotations__ = {**getattr(original, "__annotations__", {}), **_TYPES}
    callback.__doc__ = (original.__doc__ or "") + (
        " With --nodes N: a distributed job over N nodes (Indexed Job, or one Job per index "
        "on servers without Indexed Jobs), torchrun c10d rendezvous through a Service.")
    callback._imagekit_gpujob = True  # type: ignore[attr-defined]
    info.callback = callback


def _refuse(options: list[str]) -> None:
    raise InvalidInput(f"{', '.join(options)} only with --nodes", where=COMMAND)


_install()
