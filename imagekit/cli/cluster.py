"""`imagekit cluster probe|precheck|gpu-preflight|recreate|rbac` (`cluster accept` and
`cluster model-volume`: imagekit.cli.cluster_accept).

The cluster commands talk to the Kubernetes API named by --kubeconfig (default: the one
`imagekit infra up --cluster` recorded). The kubernetes client is imported only when a cluster
command runs, so the rest of the CLI works without it. Each command checks its options, calls
one flow and prints; what the cluster commands share (options, printing, signing, the
kubeconfig and registry clients) is `imagekit.cli.common`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from imagekit import doc_url
from imagekit.cli import trustopts
from imagekit.cli.app import (
    SUMMARIES,
    SentenceGroup,
    app,
    evidence_store,
    guarded,
    print_json,
    settings,
)
from imagekit.cli.common import (
    EvidenceDir,
    GpuTolerationOpt,
    JsonOpt,
    KubeconfigOpt,
    SelectorOpt,
    SignKeyOpt,
    finish,
    images_spec,
    kubeconfig_path,
    registry_client,
    say,
    say_signed,
    sign_phase,
)
from imagekit.cli.surface import option
from imagekit.cli.trustopts import TrustKeyOpt, TrustPolicyOpt
from imagekit.errors import InvalidInput

NamespaceOpt = option("--namespace")

cluster_app = typer.Typer(cls=SentenceGroup, help=SUMMARIES["cluster"], no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")


@cluster_app.command("probe")
@guarded
def cluster_probe(
    reference: str = typer.Argument(..., metavar="NAME|REF",
                                    help="An image NAME of the spec (the profile's latest "
                                         "verified build) or a reference by tag or digest."),
    namespace: str = NamespaceOpt,
    selector: list[str] = SelectorOpt,
    toleration: list[str] = GpuTolerationOpt,
    probes_dir: Path = option("--probes-dir"),
    probe: list[str] = option("--probe", note="Default: the spec's probes for this "
                                              "repository, else all without arguments."),
    spec_file: Path = option("--spec", note="It gives each repository's probes."),
    profile: str = option("--profile", note="Its accepted statuses apply."),
    timeout: float = option("--pod-timeout"),
    expect_digest: str = option("--expect-digest"),
    keep_pull_secret: bool = option("--keep-pull-secret"),
    key: Path = SignKeyOpt,
    trust_key: list[Path] = TrustKeyOpt,
    trust_policy: Path = TrustPolicyOpt,
    kubeconfig: Path = KubeconfigOpt,
    evidence_dir: Path = EvidenceDir,
    json_output: bool = JsonOpt,
) -> None:
    """Run the zero-GPU probe Pod pinned to the tag's digest; check imageID and the probes;
    store logs and status in evidence; delete the Pod and wait until it is gone."""
    from imagekit.attest.phase import load_signing_key
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.manifests import GPU_TOLERATION
    from imagekit.cluster.probe import ProbeOptions, run_probe
    from imagekit.inputs import (
        dns_label,
        existing_dir,
        label_pairs,
        positive,
        probe_choices,
        tolerations,
    )
    from imagekit.names import resolve_target
    from imagekit.oci import Digest
    from imagekit.probe.runner import plan_for
    from imagekit.probe.runner import probes_dir as default_probes_dir

    probes_dir = probes_dir or default_probes_dir(settings().probes_dir)
    signing = load_signing_key(key)   # a bad key is exit 2 before anything runs
    expected = Digest.parse(expect_digest) if expect_digest else None
    timeout = positive(timeout, "--pod-timeout", maximum=86400)
    dns_label(namespace, "--namespace")
    existing_dir(probes_dir, "--probes-dir")
    if not any(probes_dir.glob("*.py")):
        raise InvalidInput("--probes-dir holds no probe (*.py)", where=str(probes_dir))
    trust = trustopts.load(trust_key, trust_policy)
    store = evidence_store(evidence_dir)
    # NAME or REF, one resolver: `sglang` is the spec's image, never docker.io/library/sglang
    # (with --trust-key, a NAME this store has no build of: the profile's staging tag,
    # verified by the statements trusted keys signed about it)
    resolved = resolve_target(reference, spec_path=images_spec(spec_file), store=store,
                              profile=profile,
                              remote=trustopts.name_resolver(trust, store))
    ref = resolved.reference
    spec, image = resolved.spec, resolved.image
    found = (spec, resolved.name, image) if image is not None else None
    # an unknown --profile is bad input, found before the Pod
    profile_name = spec.profile(profile)[0] if spec is not None and found else profile
    # --probe by hand, else the spec's probes with the arguments `imagekit probe` gives them
    # (find_spec's modules, cli_help's engine, serve_args' engine and serve commands)
    plan = probe_choices(probe) or \
        (plan_for(image, profile=profile_name).arguments() if found is not None else None)
    client, docker_config = registry_client(ref.registry)
    options = ProbeOptions(namespace=namespace, node_selector=label_pairs(selector, "--selector"),
                           tolerations=tolerations(toleration) or [GPU_TOLERATION],
                           probes_dir=probes_dir, timeout_s=timeout,
                           docker_config_dir=docker_config, expect_digest=expected,
                           keep_pull_secret=keep_pull_secret, plan=plan,
                           manifests_dir=settings().manifests_dir)
    from imagekit.imagesverify.cluster import cluster_probe_exit
    from imagekit.results import Status

    with client, Kube(kubeconfig_path(kubeconfig)) as kube:
        report = run_probe(kube, ref, client, options, store)
        code, accepted = cluster_probe_exit(report.checks, found, profile)
        signed = None
        if signing is not None:
            signed = sign_phase("cluster-probe", signing, report, client, ref,
                                Digest.parse(str(report.digest)), kube, accepted=accepted,
                                verdict=Status.PASS if code == 0 else report.status,
                                profile=profile_name)
    if json_output:
        print_json({**report.model_dump(mode="json"), "accepted": accepted,
                    "exit_code": code,
                    **({"attestations": [signed.model_dump(mode="json")]} if signed else {})})
    else:
        _say_probe(report, accepted, code)
        say_signed(signed)
    if code:
        raise typer.Exit(code)



def _say_probe(report: Any, accepted: list[dict], code: int) -> None:
    """The verdict first, in the words the exit status has (a FAIL the profile accepts does not
    make the probe FAIL), then each check, an accepted one with the profile's reason."""
    reasons = {row["check"]: f"accepted by profile {row['profile']}: {row['reason']}"
               for row in accepted}
    passed = sum(check.status.value == "PASS" for check in report.checks)
    open_ = [f"{check.name} {check.status.value}" for check in report.checks
             if check.status.value != "PASS" and check.name not in reasons]
    verdict = "PASS" if code == 0 else ("ERROR" if code == 2 else "FAIL")
    line = f"{verdict} {report.subject}: {passed} check(s) pass"
    if reasons:
        line += f", {len(reasons)} accepted ({', '.join(reasons)})"
    if open_:
        line += f"; not passing: {', '.join(open_)}"
    say(line)
    for check in report.checks:
        why = f" [{reasons[check.name]}]" if check.name in reasons else ""
        say(f"  {check.status.value:8} {check.name}: {check.detail}{why}")
    if report.evidence:
        say(f"evidence: {report.evidence}")


@cluster_app.command("precheck")
@guarded
def cluster_precheck(
    node: str = option("--node"),
    selector: list[str] = SelectorOpt,
    toleration: list[str] = GpuTolerationOpt,
    gpus: int = option("--gpus"),
    priority_class: str = option("--priority-class"),
    preemption_policy: str = option("--preemption-policy"),
    non_preempting: bool = option("--non-preempting"),
    storage_label: str = option("--storage-label"),
    storage_driver: str = option("--storage-driver"),
    model_claim: str = option("--model-claim", note="Its volume's node affinity is judged."),
    pod_file: Path = option("--pod-file", note="The Pod's own fields then replace --selector, "
                                               "--toleration, --gpus, --priority-class, "
                                               "--preemption-policy and --namespace."),
    namespace: str = NamespaceOpt,
    image_cuda: str = option("--image-cuda"),
    image_arch: str = option("--image-arch"),
    kubeconfig: Path = KubeconfigOpt,
    json_output: bool = JsonOpt,
) -> None:
    """Before any GPU Pod: node, labels, taints, storage capability, priority admission,
    workloads and free GPUs — each finding a line with its reason. Creates nothing."""
    from imagekit.cluster import admit
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.manifests import GPU_TOLERATION
    from imagekit.cluster.podfile import load_pod_file
    from imagekit.cluster.precheck import PodIntent, StorageNeed, non_preempting_of, precheck
    from imagekit.cluster.precheck import preemption_policy as checked_policy
    from imagekit.inputs import (
        count,
        dns_label,
        dns_subdomain,
        image_facts,
        label_pairs,
        tolerations,
    )
    from imagekit.results import CheckReport

    count(gpus, "--gpus", minimum=0, maximum=1024)
    dns_label(namespace, "--namespace")
    if node is not None:
        dns_subdomain(node, "--node")
    if priority_class is not None:
        dns_subdomain(priority_class, "--priority-class")
    claims = [model_claim] if model_claim is not None else []
    for claim in claims:  # '../../../nodes' would GET /api/v1/nodes as a PVC
        dns_subdomain(claim, "--model-claim")
    storage = None
    if storage_label or storage_driver:
        storage = StorageNeed(label=storage_label, csi_driver=storage_driver)
    checked_policy(preemption_policy)
    if pod_file is not None:
        pod = load_pod_file(pod_file)
        intent = PodIntent.from_pod(pod, storage=storage, non_preempting=non_preempting)
        if node:
            intent = intent.model_copy(update={"node_name": node})
        if image_cuda is not None or image_arch is not None:
            intent = intent.model_copy(update=image_facts(image_cuda, image_arch))
        if claims:
            intent = intent.model_copy(update={"claims": [*intent.claims, *claims]})
    else:
        intent = PodIntent(namespace=namespace, node_name=node,
                           node_selector=label_pairs(selector, "--selector"),
                           tolerations=tolerations(toleration) or [GPU_TOLERATION], gpus=gpus,
                           priority_class_name=priority_class,
                           preemption_policy=preemption_policy,
                           non_preempting=non_preempting_of(non_preempting, preemption_policy),
                           storage=storage, claims=claims,
                           **image_facts(image_cuda, image_arch))
    with Kube(kubeconfig_path(kubeconfig)) as kube:
        admit.check_permissions(kube, "precheck", intent.namespace)
        checks = precheck(kube, intent)
        if pod_file is not None:
            checks.append(admit.pod_security_check(kube, pod, intent.namespace))
    finish(CheckReport.of(intent.node_name or str(intent.node_selector), checks), json_output)


#: The options each mode of `cluster gpu-preflight` uses, by parameter name; one given on the
#: command line that its mode does not use is refused (it would be ignored).
PREFLIGHT_MODES: dict[str, frozenset[str]] = {
    "one preflight Pod (without --nodes or --each-node)": frozenset({
        "gpus", "priority_class", "preemption_policy", "storage_label", "storage_driver",
        "key"}),
    "--each-node (an independent Pod per node)": frozenset({
        "each_node", "gpus", "cordon_failed", "taint_failed", "preflight_arg"}),
    "--nodes N (one distributed job)": frozenset({
        "nodes", "gpus_per_node", "pods_per_node", "pod_env", "job_mode", "priority_class",
        "preflight_arg"}),
}
#: ... and those every mode uses
PREFLIGHT_COMMON = frozenset({"reference", "namespace", "selector", "toleration", "script",
                              "submit", "timeout", "spec", "trust_key", "trust_policy",
                              "kubeconfig", "evidence_dir", "json_output"})


def refuse_unused(ctx: typer.Context, mode: str) -> None:
    """One line (exit 2) naming every option given on the command line that `mode` would
    ignore, e.g. `--key` with `--nodes` (README once showed it: a dry run, silently unsigned)."""
    used = PREFLIGHT_COMMON | PREFLIGHT_MODES[mode]
    unused = [param.opts[0] for param in ctx.command.params
              if param.name not in used and param.name is not None
              and getattr(ctx.get_parameter_source(param.name), "name", "") == "COMMANDLINE"]
    if unused:
        raise InvalidInput(f"{', '.join(unused)} {'does' if len(unused) == 1 else 'do'} "
                           f"nothing with {mode}: leave {'it' if len(unused) == 1 else 'them'} "
                           "out", where="cluster gpu-preflight")


@cluster_app.command("gpu-preflight")
@guarded
def cluster_gpu_preflight(
    ctx: typer.Context,
    reference: str = typer.Argument(..., metavar="NAME|REF",
                                    help="An image NAME of the spec or a reference by tag or "
                                         "digest."),
    namespace: str = NamespaceOpt,
    selector: list[str] = SelectorOpt,
    toleration: list[str] = GpuTolerationOpt,
    gpus: int = option("--gpus", note="One Pod, or each node's Pod with --each-node."),
    priority_class: str = option("--priority-class"),
    preemption_policy: str = option("--preemption-policy", note="One Pod only."),
    storage_label: str = option("--storage-label", note="One Pod only."),
    storage_driver: str = option("--storage-driver", note="One Pod only."),
    script: Path = option("--script"),
    submit: bool = option("--submit", note="--each-node has no dry run: it needs --submit."),
    timeout: float = option("--pod-timeout"),
    each_node: bool = option("--each-node"),
    cordon_failed: bool = option("--cordon-failed"),
    taint_failed: bool = option("--taint-failed"),
    preflight_arg: list[str] = option("--preflight-arg", note="With --each-node or --nodes."),
    spec: Path = option("--spec"),
    key: Path = SignKeyOpt,
    trust_key: list[Path] = TrustKeyOpt,
    trust_policy: Path = TrustPolicyOpt,
    kubeconfig: Path = KubeconfigOpt,
    evidence_dir: Path = EvidenceDir,
    json_output: bool = JsonOpt,
    nodes: int = option("--nodes"),
    gpus_per_node: int = option("--gpus-per-node"),
    pods_per_node: int = option("--pods-per-node"),
    pod_env: list[str] = option("--env"),
    job_mode: str = option("--job-mode"),
) -> None:
    """Render the GPU preflight Pod pinned by digest and precheck that exact spec; only with
    --submit and a clean precheck is it run (its log to the evidence, then deleted and waited
    for until gone): without --submit it is a dry run and nothing is created. --each-node:
    one such Pod on every matching node at once (needs --submit). --nodes N: one distributed
    job over N nodes (an Indexed Job, or one Job per index on servers without them), torchrun
    c10d rendezvous through a Service. An option the chosen mode does not use is refused."""
    from imagekit.cli import gpujob

    if nodes is not None and each_node:
        raise InvalidInput("--nodes (one distributed job) and --each-node (one independent "
                           "preflight per node) exclude each other", where="--each-node")
    mode = [*PREFLIGHT_MODES][2 if nodes is not None else 1 if each_node else 0]
    refuse_unused(ctx, mode)
    if each_node and not submit:
        raise InvalidInput("--each-node runs a Pod on every matching node at once and has no "
                           "dry run: add --submit", where="--each-node")
    if nodes is not None:  # the distributed job: its own checks, flow and printing
        return gpujob.preflight_job(
            reference=reference, namespace=namespace, selector=selector,
            toleration=toleration, priority_class=priority_class, script=script,
            submit=submit, timeout=timeout, kubeconfig=kubeconfig, evidence_dir=evidence_dir,
            json_output=json_output, nodes=nodes, gpus_per_node=gpus_per_node,
            pods_per_node=pods_per_node, pod_env=pod_env, job_mode=job_mode,
            preflight_arg=preflight_arg, spec=spec, trust_key=trust_key,
            trust_policy=trust_policy)

    from imagekit import packaged
    from imagekit.attest.phase import load_signing_key
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.manifests import GPU_TOLERATION
    from imagekit.cluster.precheck import StorageNeed
    from imagekit.cluster.precheck import preemption_policy as checked_policy
    from imagekit.cluster.preflight import PreflightOptions, run_preflight
    from imagekit.inputs import (
        count,
        dns_label,
        dns_subdomain,
        label_pairs,
        positive,
        read_text,
        tolerations,
    )
    from imagekit.names import digest_of, resolve_target

    signing = load_signing_key(key)   # a bad key is exit 2 before anything runs
    count(gpus, "--gpus", minimum=0, maximum=1024)  # 0: a CPU (gloo) preflight
    timeout = positive(timeout, "--pod-timeout", maximum=7 * 86400)
    dns_label(namespace, "--namespace")
    if priority_class is not None:
        dns_subdomain(priority_class, "--priority-class")
    if script is not None:
        if not script.exists():
            raise InvalidInput("preflight script not found", where=str(script))
        if not script.is_dir():
            read_text(script, "preflight script")
    script = script or packaged.path("preflight")
    checked_policy(preemption_policy)
    node_selector = label_pairs(selector, "--selector")
    tolerated = tolerations(toleration) or [GPU_TOLERATION]
    trust = trustopts.load(trust_key, trust_policy)
    store = evidence_store(evidence_dir)
    ref = resolve_target(reference, spec_path=images_spec(spec), store=store,
                         remote=trustopts.name_resolver(trust, store)).reference
    client, docker_config = registry_client(ref.registry)
    with client:
        digest = digest_of(client, ref)
    if each_node:
        return gpujob.each_node_preflight(
            ref.with_digest(digest), namespace=namespace, selector=node_selector,
            tolerations=tolerated, gpus=gpus, script=script,
            script_args=list(preflight_arg or []), timeout=timeout, cordon=cordon_failed,
            taint=taint_failed, docker_config=docker_config,
            kubeconfig=kubeconfig_path(kubeconfig), evidence_dir=evidence_dir,
            json_output=json_output)
    storage = StorageNeed(label=storage_label, csi_driver=storage_driver) \
        if storage_label or storage_driver else None
    options = PreflightOptions(
        namespace=namespace, node_selector=node_selector, tolerations=tolerated, gpus=gpus,
        priority_class_name=priority_class, preemption_policy=preemption_policy,
        storage=storage, script=script, timeout_s=timeout, docker_config_dir=docker_config,
        manifests_dir=settings().manifests_dir)
    with Kube(kubeconfig_path(kubeconfig)) as kube:
        report = run_preflight(kube, ref.with_digest(digest), options, store, submit)
        signed = None
        if signing is not None:
            signer, _ = registry_client(ref.registry)
            with signer:
                signed = sign_phase("gpu-preflight", signing, report, signer, ref, digest,
                                    kube)
    finish(report, json_output, signed)


@cluster_app.command("recreate")
@guarded
def cluster_recreate(
    pod_file: Path = typer.Argument(..., help="Pod manifest (YAML or JSON)."),
    timeout: float = option("--delete-timeout"),
    kubeconfig: Path = KubeconfigOpt,
    json_output: bool = JsonOpt,
) -> None:
    """Replace a Pod whose immutable fields (nodeSelector…) change: delete the old one (that
    uid only), watch until it is really gone, then create — 409s are looked at, not retried
    blindly."""
    from imagekit.cluster import admit
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.podfile import load_pod_file
    from imagekit.cluster.pods import recreate_pod
    from imagekit.inputs import positive

    timeout = positive(timeout, "--delete-timeout", maximum=86400)
    pod = load_pod_file(pod_file, need_name=True)
    with Kube(kubeconfig_path(kubeconfig)) as kube:
        admit.prepare(kube, "recreate", pod["metadata"].get("namespace", "default"), [pod])
        outcome = recreate_pod(kube, pod, timeout=timeout)
    doc = {"pod": pod["metadata"]["name"],
           "namespace": outcome.pod["metadata"].get("namespace"),
           "uid": outcome.pod["metadata"]["uid"], "replaced_uid": outcome.replaced_uid,
           "waited_seconds": round(outcome.waited_seconds, 2), "conflicts": outcome.conflicts}
    if json_output:
        print_json(doc)
    else:
        replaced = f"replaced uid {doc['replaced_uid']} after {doc['waited_seconds']} s" \
            if doc["replaced_uid"] else "no previous Pod"
        say(f"created {doc['namespace']}/{doc['pod']} uid {doc['uid']} ({replaced})")
        for conflict in outcome.conflicts:
            say(f"  {conflict}")


@cluster_app.command("rbac", help=(
    "Print, as YAML for `kubectl apply -f -`, what the cluster commands need and no more: a "
    "ServiceAccount, Role and RoleBinding in the namespace, and a read-only ClusterRole for "
    "the nodes, PriorityClasses and PersistentVolumes the GPU prechecks read. "
    f"{doc_url('reference/rbac')} says which command uses each permission and why."))
@guarded
def cluster_rbac(
    namespace: str = option("--namespace", note="The cluster commands run in it."),
    service_account: str = option("--service-account"),
    command: list[str] = option("--command"),
    pod_security: str = option("--pod-security"),
    namespace_object: bool = option("--namespace-object"),
    json_output: bool = option("--json", note="A List of the objects; kubectl applies it "
                                              "too."),
) -> None:
    """The RBAC the cluster commands need (its help: the decorator's, with the docs' URL)."""
    from imagekit.cluster.permissions import COMMANDS, rbac_objects, rbac_yaml

    objects = rbac_objects(namespace, service_account=service_account,
                           commands=tuple(command) if command else COMMANDS,
                           pod_security=pod_security, with_namespace=namespace_object)
    if json_output:
        print_json({"apiVersion": "v1", "kind": "List", "items": objects})
        return
    typer.echo(rbac_yaml(objects), nl=False)
