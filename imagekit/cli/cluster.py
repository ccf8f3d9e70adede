"""`imagekit cluster probe|precheck`, `imagekit serve-command`, `imagekit launch-log parse`.

The cluster commands talk to the Kubernetes API named by --kubeconfig (default: the one
`imagekit infra up --cluster` recorded). The kubernetes client is imported only when a cluster
command runs, so the rest of the CLI works without it.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from imagekit.cli import trustopts
from imagekit.cli.trustopts import TrustKeyOpt, TrustPolicyOpt
from imagekit.cli.app import app, console, evidence_store, guarded, print_json
from imagekit.errors import InvalidInput

if TYPE_CHECKING:  # each command imports what it uses (`imagekit --help` stays fast)
    from imagekit.results import CheckReport

cluster_app = typer.Typer(help="Probe images and pre-check GPU Pods on a Kubernetes cluster.",
                          no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
launch_log_app = typer.Typer(help="Engine startup logs: phases and startupProbe budget.",
                             no_args_is_help=True)
app.add_typer(launch_log_app, name="launch-log")

KubeconfigOpt = typer.Option(None, "--kubeconfig", envvar="KUBECONFIG",
                             help="kubeconfig (default: the one imagekit infra recorded).")
EvidenceDir = typer.Option(None, "--evidence-dir", envvar="IMAGEKIT_EVIDENCE_DIR",
                           help="Evidence store root (default ./.evidence).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document.")
SelectorOpt = typer.Option(None, "--selector", help="nodeSelector key=value.")
GpuTolerationOpt = typer.Option(
    None, "--toleration", help="key[=value]:Effect (default: tolerate nvidia.com/gpu).")
SignKeyOpt = typer.Option(None, "--key", dir_okay=False,
                          help="Sign what this phase saw (cluster, node, imageID, verdicts) "
                               "with this private key and attach it at the registry the "
                               "image came from (read before anything runs).")


def _say(text: str) -> None:
    """Plain text for people: no markup, no :emoji: codes (a probe named `a` is not 🅰)."""
    console.print(text, markup=False, emoji=False, soft_wrap=True)


def _print_report(report: CheckReport, json_output: bool) -> None:
    if json_output:
        print_json(report)
    else:
        for check in report.checks:
            _say(f"{check.status.value:8} {check.name}: {check.detail}")
        _say(f"{report.status.value} {report.subject}")
        if report.evidence:
            _say(f"evidence: {report.evidence}")


def _finish(report: CheckReport, json_output: bool, signed=None) -> None:
    from imagekit.results import exit_code_for

    if json_output and signed is not None:
        print_json({**report.model_dump(mode="json"),
                    "attestations": [signed.model_dump(mode="json")]})
    else:
        _print_report(report, json_output)
        _say_signed(signed)
    code = exit_code_for(report.checks)
    if code:
        raise typer.Exit(code)


def _say_signed(signed) -> None:
    if signed is not None:
        _say(f"signed {signed.predicate_type}: {signed.repository}@{signed.subject} <- "
             f"{signed.manifest} ({signed.listing})")


def _sign_phase(phase: str, key, report: CheckReport, client, ref, digest, kube, *,
                accepted: list[dict] | None = None, verdict=None, profile: str | None = None):
    """With --key: the phase statement signed and attached at `ref`'s registry (None without
    a key). The key was loaded before anything ran."""
    if key is None:
        return None
    from imagekit.attest.phase import phase_predicate, sign_phase

    predicate = phase_predicate(phase, report, digest=digest, reference=str(ref),
                                cluster=kube.host, accepted=accepted, verdict=verdict,
                                profile=profile)
    return sign_phase(client, ref, digest, predicate, key)


@app.command("serve-command")
@guarded
def serve_command(
    extra: list[str] = typer.Argument(None, help="Extra engine arguments, appended as given."),
    pod_image: str = typer.Option(None, help="Instead: print the engine server Pod + ConfigMap "
                                             "(YAML) for this image (repo@sha256:…)."),
    startup_log: Path = typer.Option(None, help="With --pod-image: size the startupProbe from "
                                                "this observed startup log."),
    startup_seconds: int = typer.Option(3600, help="With --pod-image and no log: startupProbe "
                                                   "budget in seconds."),
    name: str = typer.Option("engine", help="With --pod-image: Pod name."),
    namespace: str = typer.Option("default", help="With --pod-image: namespace."),
    model_claim: str = typer.Option(None, help="With --pod-image: read-only model PVC."),
    json_output: bool = JsonOpt,
) -> None:
    """Print the engine serve command from ENGINE, MODEL_PATH, TP, MAX_CONTEXT, MAX_REQUESTS,
    DISABLE_PIECEWISE_CUDA_GRAPH, HOST, PORT (the same rules as manifests/launch.sh). With
    EXECUTE=1 it replaces itself with that command."""
    from imagekit.inputs import count, dns_label, dns_subdomain, read_text
    from imagekit.launch import ServeConfig, serve_argv

    if pod_image:  # every field of the manifest is checked before one line is printed
        count(startup_seconds, "--startup-seconds", minimum=1, maximum=7 * 24 * 3600)
        dns_subdomain(name, "--name")
        dns_label(namespace, "--namespace")
        if model_claim is not None:
            dns_subdomain(model_claim, "--model-claim")
    config = ServeConfig.from_env(os.environ, extra_args=tuple(extra or ()))
    argv = serve_argv(config)
    if pod_image:
        import yaml

        from imagekit.launch import parse_startup_log, required_startup_seconds
        from imagekit.launch.budget import ProbeBudget
        from imagekit.launch.pod import engine_pod

        seconds = startup_seconds
        if startup_log is not None:
            seconds = required_startup_seconds(parse_startup_log(
                read_text(startup_log, "startup log"), engine=config.engine.value)
            ).required_seconds
        pod, configmap = engine_pod(config, pod_image, ProbeBudget.covering(seconds),
                                    name=name, namespace=namespace, model_claim=model_claim)
        if json_output:
            print_json({"configmap": configmap, "pod": pod})
        else:
            _say(yaml.safe_dump_all([configmap, pod], sort_keys=False))
        return
    if os.environ.get("EXECUTE") == "1":
        os.execvp(argv[0], argv)
    if json_output:
        print_json({"argv": argv, "config": config.model_dump(mode="json")})
    else:
        _say(shlex.join(argv))


@launch_log_app.command("parse")
@guarded
def launch_log_parse(
    log: Path = typer.Argument(..., help="Engine startup log file."),
    engine: str = typer.Option("sglang", help="sglang or vllm."),
    startup_probe_seconds: int = typer.Option(
        None, help="The startupProbe budget to judge (failureThreshold × periodSeconds)."),
    expect_prefill_graphs: str = typer.Option(
        None, help="disabled|enabled: check the log against DISABLE_PIECEWISE_CUDA_GRAPH."),
    subject: str = typer.Option(None, help="Evidence key (image digest or name); with it the "
                                           "raw log and the parsed phases go to evidence."),
    evidence_dir: Path = EvidenceDir,
    json_output: bool = JsonOpt,
) -> None:
    """Weight-load seconds per rank, CUDA graph capture, piecewise buckets, missing MoE tuning
    config; with --startup-probe-seconds, whether that budget covers them."""
    from imagekit.inputs import count, read_text
    from imagekit.launch import parse_startup_log, required_startup_seconds, startup_budget_check
    from imagekit.launch.budget import ProbeBudget
    from imagekit.results import exit_code_for

    if engine not in ("sglang", "vllm"):
        raise InvalidInput("engine must be sglang or vllm", where=engine)
    if startup_probe_seconds is not None:
        count(startup_probe_seconds, "--startup-probe-seconds", minimum=1,
              maximum=7 * 24 * 3600)
    text = read_text(log, "startup log", max_bytes=256 * 1024 * 1024)
    if not text.strip():
        raise InvalidInput("startup log is empty", where=str(log))
    store = evidence_store(evidence_dir) if subject else None
    report = parse_startup_log(text, engine=engine)
    need = required_startup_seconds(report)
    suggested = ProbeBudget.covering(need.required_seconds)
    from imagekit.launch.startup_log import parsed_check, prefill_graphs_check

    if expect_prefill_graphs not in (None, "disabled", "enabled"):
        raise InvalidInput("--expect-prefill-graphs is disabled or enabled",
                           where=expect_prefill_graphs)
    checks = []
    if startup_probe_seconds is not None:
        checks.append(startup_budget_check(report, startup_probe_seconds))
    if expect_prefill_graphs is not None:
        checks.append(prefill_graphs_check(report, expect_prefill_graphs == "disabled"))
    parsed = parsed_check(report)  # a log with no startup phase is never a PASS
    if not report.recognized:
        checks.insert(0, parsed)
    check = checks[0] if checks else None
    doc = {"startup": report.summary(), "required": need.model_dump(),
           "suggested_startup_probe": {**suggested.model_dump(),
                                       "total_seconds": suggested.total_seconds},
           "check": check.model_dump(mode="json") if check else None,
           "checks": [c.model_dump(mode="json") for c in checks], "evidence": None}
    if subject and store is not None:
        from imagekit.launch.evidence import record_startup

        doc["evidence"] = record_startup(store, subject, engine=engine, log=log, text=text,
                                         report=report, need=need, checks=checks or [parsed])
    if json_output:
        print_json(doc)
    else:
        s = report.summary()
        _say(f"weight load: {s['weight_load_seconds_min']}–{s['weight_load_seconds_max']}"
                      f" s over ranks {s['ranks']}")
        _say(f"cuda graph: {s['cuda_graph_seconds']} s, bs {s['cuda_graph_batch_sizes']}")
        _say(f"piecewise: began={s['piecewise_began']} buckets={s['piecewise_buckets']} "
                      f"seconds={s['piecewise_seconds']}")
        for moe in report.moe_config_missing:
            _say(f"MoE tuning config missing (default kernel config used; performance "
                          f"hint): device={moe.device} E={moe.E} N={moe.N}")
        _say(f"startup needs {need.required_seconds} s"
                      f"{'' if need.complete else ' at least'}; suggested startupProbe "
                      f"periodSeconds={suggested.period_seconds} "
                      f"failureThreshold={suggested.failure_threshold}")
        for each in checks:
            _say(f"{each.status.value} {each.name}: {each.detail}")
    if checks and exit_code_for(checks):
        raise typer.Exit(exit_code_for(checks))


# ------------------------------------------------------------------------------ cluster

def _kubeconfig(explicit: Path | None) -> Path:
    """--kubeconfig / $KUBECONFIG, else the one `imagekit infra up --cluster` recorded. An
    explicit one must be a readable YAML mapping (checked before any other work)."""
    if explicit is not None:
        from imagekit.inputs import load_yaml, read_text

        if not isinstance(load_yaml(read_text(explicit, "--kubeconfig"), str(explicit),
                                    what="--kubeconfig"), dict):
            raise InvalidInput("--kubeconfig is not a kubeconfig (a YAML mapping)",
                               where=str(explicit))
        return explicit
    try:
        from imagekit.infra.state import load_state
        state = load_state()
        if state.kubeconfig is not None and state.kubeconfig.is_file():
            return state.kubeconfig
        recorded = state.state_dir / "k8s" / "admin.kubeconfig"
        if recorded.is_file():
            return recorded
    except Exception:  # noqa: BLE001 - no infra state: fall back to the client default
        pass
    from imagekit.cluster.kube import default_kubeconfig
    return default_kubeconfig()


def _registry_client(registry: str):
    """A RegistryClient for `registry`, trusting the infra CA and reading infra's docker config
    when the registry is one of infra's loopback registries."""
    from imagekit.cli.app import settings
    from imagekit.infra.state import registry_trust
    from imagekit.registry import RegistryClient, RegistryOptions

    given = settings()  # the retry knobs and the rest of IMAGEKIT_* registry settings
    options = registry_trust(registry, given.state_dir)
    return RegistryClient(registry, RegistryOptions.from_settings(given, **options)), \
        options.get("docker_config")


def _parse_pairs(values: list[str] | None, what: str) -> dict[str, str]:
    out = {}
    for value in values or []:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise InvalidInput(f"{what} must look like key=value", where=value)
        out[key] = val
    return out


def _parse_selector(values: list[str] | None) -> dict[str, str]:
    from imagekit.inputs import label_pairs

    return label_pairs(values, "--selector")


def _parse_tolerations(values: list[str] | None) -> list[dict]:
    """key[=value]:Effect, or key:Effect (operator Exists)."""
    out = []
    for value in values or []:
        spec, sep, effect = value.rpartition(":")
        if not sep or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not spec:
            raise InvalidInput("toleration must look like key[=value]:NoSchedule|NoExecute|"
                               "PreferNoSchedule", where=value)
        key, eq, val = spec.partition("=")
        out.append({"key": key, "operator": "Equal", "value": val, "effect": effect} if eq else
                   {"key": key, "operator": "Exists", "effect": effect})
    return out


def _probe_plan(values: list[str] | None) -> list[tuple[str, list[str]]] | None:
    if not values:
        return None
    plan = []
    for value in values:
        name, _, args = value.partition("=")
        plan.append((name, [a for a in args.split(",") if a] if args else []))
    return plan


def _plan_from_spec(found, profile: str | None = None) -> list[tuple[str, list[str]]] | None:
    """The spec's probes for that image, with the arguments `imagekit probe` gives them
    (find_spec's modules, cli_help's engine, serve_args' engine and serve commands)."""
    if found is None:
        return None
    from imagekit.probe.runner import plan_for

    spec, _, image = found
    plan = plan_for(image, profile=spec.profile(profile)[0])
    return [(probe, plan.argv(probe)[1:]) for probe in image.probes]


@cluster_app.command("probe")
@guarded
def cluster_probe(
    reference: str = typer.Argument(..., help="An image NAME of the spec (the profile's latest "
                                              "verified build) or a reference by tag or digest."),
    namespace: str = typer.Option("imagekit", help="Namespace for the probe Pod."),
    selector: list[str] = SelectorOpt,
    toleration: list[str] = GpuTolerationOpt,
    probes_dir: Path = typer.Option(None, help="Directory of in-image probes (*.py); default: "
                                               "the packaged probes ($IMAGEKIT_PROBES_DIR)."),
    probe: list[str] = typer.Option(
        None, "--probe", help="Run only these probes, NAME or NAME=ARG,ARG (repeatable; "
                              "e.g. find_spec=nixl,sglang cli_help=sglang). Default: the "
                              "spec's probes for this repository, else all without arguments."),
    spec_file: Path = typer.Option(None, "--spec",
                                   help="Images spec giving each repository's probes (default "
                                        "$IMAGEKIT_IMAGES_SPEC, ./dockerfiles/images.toml, "
                                        "else the packaged one)."),
    profile: str = typer.Option(None, help="Spec profile whose accepted statuses apply "
                                           "(default: the spec's default profile)."),
    timeout: float = typer.Option(300, help="Seconds to wait for the Pod's outcome."),
    expect_digest: str = typer.Option(None, help="The digest the tag must resolve to."),
    keep_pull_secret: bool = typer.Option(False, help="Keep the run's pull Secret (default: "
                                                      "deleted with the Pod)."),
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
    from imagekit.inputs import dns_label, existing_dir, positive
    from imagekit.names import resolve_target
    from imagekit.oci import Digest
    from imagekit.probe.runner import probes_dir as default_probes_dir

    probes_dir = probes_dir or default_probes_dir()
    signing = load_signing_key(key)   # a bad key is exit 2 before anything runs
    expected = Digest.parse(expect_digest) if expect_digest else None
    timeout = positive(timeout, "--timeout", maximum=86400)
    dns_label(namespace, "--namespace")
    existing_dir(probes_dir, "--probes-dir")
    if not any(probes_dir.glob("*.py")):
        raise InvalidInput("--probes-dir holds no probe (*.py)", where=str(probes_dir))
    trust = trustopts.load(trust_key, trust_policy)
    store = evidence_store(evidence_dir)
    # NAME or REF, one resolver: `sglang` is the spec's image, never docker.io/library/sglang
    # (with --trust-key, a NAME this store has no build of: the profile's staging tag,
    # verified by the statements trusted keys signed about it)
    resolved = resolve_target(reference, spec_path=spec_file, store=store, profile=profile,
                              remote=trustopts.name_resolver(trust, store))
    ref = resolved.reference
    found = (resolved.spec, resolved.name, resolved.image) if resolved.image is not None \
        else None
    if found is not None:
        found[0].profile(profile)  # an unknown --profile is bad input, found before the Pod
    client, docker_config = _registry_client(ref.registry)
    options = ProbeOptions(namespace=namespace, node_selector=_parse_selector(selector),
                           tolerations=_parse_tolerations(toleration) or [GPU_TOLERATION],
                           probes_dir=probes_dir, timeout_s=timeout,
                           docker_config_dir=docker_config, expect_digest=expected,
                           keep_pull_secret=keep_pull_secret,
                           plan=_probe_plan(probe) or _plan_from_spec(found, profile))
    from imagekit.imagesverify.cluster import cluster_probe_exit
    from imagekit.results import Status

    with client, Kube(_kubeconfig(kubeconfig)) as kube:
        report = run_probe(kube, ref, client, options, store)
        code, accepted = cluster_probe_exit(report.checks, found, profile)
        signed = _sign_phase("cluster-probe", signing, report, client, ref,
                             Digest.parse(report.digest), kube, accepted=accepted,
                             verdict=Status.PASS if code == 0 else report.status,
                             profile=found[0].profile(profile)[0] if found else profile)
    if json_output:
        print_json({**report.model_dump(mode="json"), "accepted": accepted,
                    "exit_code": code,
                    **({"attestations": [signed.model_dump(mode="json")]} if signed else {})})
    else:
        _print_report(report, False)
        _say_signed(signed)
        for row in accepted:
            _say(f"ACCEPTED {row['check']} {row['status']} in profile {row['profile']}: "
                 f"{row['reason']}")
        if accepted:
            _say(f"verdict {'PASS' if code == 0 else 'not PASS'} with {len(accepted)} "
                 "accepted check(s)")
    if code:
        raise typer.Exit(code)


def _image_facts(cuda: str | None, arch: str | None) -> dict:
    from imagekit.cli.gpu import image_facts

    return image_facts(cuda, arch)


@cluster_app.command("precheck")
@guarded
def cluster_precheck(
    node: str = typer.Option(None, help="The target node's name."),
    selector: list[str] = typer.Option(None, "--selector", help="nodeSelector key=value."),
    toleration: list[str] = typer.Option(None, "--toleration", help="key[=value]:Effect."),
    gpus: int = typer.Option(0, help="nvidia.com/gpu the Pod requests."),
    priority_class: str = typer.Option(None, help="priorityClassName the Pod names."),
    preemption_policy: str = typer.Option(None, help="preemptionPolicy the Pod spec states."),
    non_preempting: bool = typer.Option(False, help="Require non-preempting semantics."),
    storage_label: str = typer.Option(None, help="Node label key[=value] the volume needs."),
    storage_driver: str = typer.Option(None, help="CSI driver the volume needs on the node."),
    model_claim: list[str] = typer.Option(None, "--model-claim", help="A PVC the Pod mounts: "
                                          "its volume's node affinity is judged (repeatable)."),
    pod_file: Path = typer.Option(None, help="Read the intent from a Pod manifest (YAML/JSON)."),
    namespace: str = typer.Option("default", help="Namespace of the Pod."),
    image_cuda: str = typer.Option(None, help="The image's CUDA version (torch.version.cuda): "
                                              "judged against the node's driver (GFD labels)."),
    image_arch: str = typer.Option(None, help="The image's arch list, comma-separated (torch."
                                              "cuda.get_arch_list()): judged against the GPU."),
    kubeconfig: Path = KubeconfigOpt,
    json_output: bool = JsonOpt,
) -> None:
    """Before any GPU Pod: node, labels, taints, storage capability, priority admission,
    workloads and free GPUs — each finding a line with its reason. Creates nothing."""
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.podfile import load_pod_file
    from imagekit.cluster.precheck import PodIntent, StorageNeed, precheck
    from imagekit.inputs import count, dns_label, dns_subdomain
    from imagekit.results import CheckReport

    count(gpus, "--gpus", minimum=0, maximum=1024)
    dns_label(namespace, "--namespace")
    if node is not None:
        dns_subdomain(node, "--node")
    if priority_class is not None:
        dns_subdomain(priority_class, "--priority-class")
    for claim in model_claim or []:  # '../../../nodes' would GET /api/v1/nodes as a PVC
        dns_subdomain(claim, "--model-claim")
    storage = None
    if storage_label or storage_driver:
        storage = StorageNeed(label=storage_label, csi_driver=storage_driver)
    if preemption_policy not in (None, "Never", "PreemptLowerPriority"):
        raise InvalidInput("preemption policy must be Never or PreemptLowerPriority",
                           where=preemption_policy)
    if pod_file is not None:
        pod = load_pod_file(pod_file)
        intent = PodIntent.from_pod(pod, storage=storage, non_preempting=non_preempting)
        if node:
            intent = intent.model_copy(update={"node_name": node})
        if image_cuda is not None or image_arch is not None:
            intent = intent.model_copy(update=_image_facts(image_cuda, image_arch))
        if model_claim:
            intent = intent.model_copy(update={"claims": [*intent.claims, *model_claim]})
    else:
        intent = PodIntent(namespace=namespace, node_name=node,
                           node_selector=_parse_selector(selector),
                           tolerations=_parse_tolerations(toleration), gpus=gpus,
                           priority_class_name=priority_class,
                           preemption_policy=preemption_policy,
                           non_preempting=non_preempting or preemption_policy == "Never",
                           storage=storage, claims=list(model_claim or []),
                           **_image_facts(image_cuda, image_arch))
    with Kube(_kubeconfig(kubeconfig)) as kube:
        checks = precheck(kube, intent)
    _finish(CheckReport.of(intent.node_name or str(intent.node_selector), checks), json_output)


@cluster_app.command("gpu-preflight")
@guarded
def cluster_gpu_preflight(
    reference: str = typer.Argument(..., help="An image NAME of the spec or a reference by tag or digest."),
    namespace: str = typer.Option("imagekit", help="Namespace for the Pod."),
    selector: list[str] = SelectorOpt,
    toleration: list[str] = GpuTolerationOpt,
    gpus: int = typer.Option(8, help="nvidia.com/gpu to request."),
    priority_class: str = typer.Option(None, help="An existing PriorityClass to use."),
    preemption_policy: str = typer.Option(None, help="preemptionPolicy to state in the spec."),
    storage_label: str = typer.Option(None, help="Node label key[=value] the volume needs."),
    storage_driver: str = typer.Option(None, help="CSI driver the volume needs on the node."),
    script: Path = typer.Option(None, help="Script run in the Pod with python3 (e.g. "
                                           "gpu_checks/preflight.py)."),
    submit: bool = typer.Option(False, "--submit", help="Submit when the precheck is clean "
                                                        "(default: precheck only)."),
    timeout: float = typer.Option(900, help="Seconds to wait for the Pod."),
    each_node: bool = typer.Option(False, "--each-node", help="One independent preflight Pod "
                                   "on every node matching --selector, in parallel; prints a "
                                   "node x check table (runs without --submit)."),
    cordon_failed: bool = typer.Option(False, "--cordon-failed", help="With --each-node: "
                                       "cordon nodes whose preflight FAILED."),
    taint_failed: bool = typer.Option(False, "--taint-failed", help="With --each-node: taint "
                                      "nodes whose preflight FAILED (imagekit.dev/gpu-preflight"
                                      "=failed:NoSchedule)."),
    preflight_arg: list[str] = typer.Option(None, "--preflight-arg", help="With --each-node: "
                                            "an argument for the script (repeatable)."),
    key: Path = SignKeyOpt,
    trust_key: list[Path] = TrustKeyOpt,
    trust_policy: Path = TrustPolicyOpt,
    kubeconfig: Path = KubeconfigOpt,
    evidence_dir: Path = EvidenceDir,
    json_output: bool = JsonOpt,
) -> None:
    """Render the GPU preflight Pod pinned by digest, precheck that exact spec, and only with
    --submit and no finding run it (logs to evidence, then delete and wait until gone).
    With --each-node: one such Pod per matching node at once (imagekit/gpu/fleet.py)."""
    from imagekit.attest.phase import load_signing_key
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.manifests import GPU_TOLERATION
    from imagekit.cluster.precheck import StorageNeed
    from imagekit.cluster.preflight import PreflightOptions, run_preflight
    from imagekit.inputs import count, dns_label, dns_subdomain, positive, read_text
    from imagekit.names import resolve_target

    signing = load_signing_key(key)   # a bad key is exit 2 before anything runs
    if signing is not None and each_node:
        raise InvalidInput("--key signs one preflight Pod's phase; --each-node runs many "
                           "(sign each node's run separately)", where="--key")
    count(gpus, "--gpus", minimum=0, maximum=1024)  # 0: a CPU (gloo) preflight
    timeout = positive(timeout, "--timeout", maximum=7 * 86400)
    dns_label(namespace, "--namespace")
    if priority_class is not None:
        dns_subdomain(priority_class, "--priority-class")
    if script is not None:
        read_text(script, "preflight script")
    if preemption_policy not in (None, "Never", "PreemptLowerPriority"):
        raise InvalidInput("preemption policy must be Never or PreemptLowerPriority",
                           where=preemption_policy)
    if script is not None and not script.is_file():
        raise InvalidInput("preflight script not found", where=str(script))
    if (cordon_failed or taint_failed or preflight_arg) and not each_node:
        raise InvalidInput("--cordon-failed, --taint-failed and --preflight-arg need "
                           "--each-node")
    trust = trustopts.load(trust_key, trust_policy)
    store = evidence_store(evidence_dir)
    ref = resolve_target(reference, store=store,
                         remote=trustopts.name_resolver(trust, store)).reference
    client, docker_config = _registry_client(ref.registry)
    with client:
        digest = ref.digest or client.resolve_tag(ref.repository, ref.tag or "latest")
    if each_node:
        from imagekit.cli.gpu import each_node_preflight

        return each_node_preflight(
            ref.with_digest(digest), namespace=namespace,
            selector=_parse_selector(selector),
            tolerations=_parse_tolerations(toleration) or [GPU_TOLERATION], gpus=gpus,
            script=script, script_args=list(preflight_arg or []), timeout=timeout,
            cordon=cordon_failed, taint=taint_failed, docker_config=docker_config,
            kubeconfig=_kubeconfig(kubeconfig), evidence_dir=evidence_dir,
            json_output=json_output)
    storage = StorageNeed(label=storage_label, csi_driver=storage_driver) \
        if storage_label or storage_driver else None
    options = PreflightOptions(
        namespace=namespace, node_selector=_parse_selector(selector),
        tolerations=_parse_tolerations(toleration) or [GPU_TOLERATION], gpus=gpus,
        priority_class_name=priority_class, preemption_policy=preemption_policy,
        storage=storage, script=script, timeout_s=timeout, docker_config_dir=docker_config)
    with Kube(_kubeconfig(kubeconfig)) as kube:
        report = run_preflight(kube, ref.with_digest(digest), options, store, submit)
        signed = None
        if signing is not None:
            signer, _ = _registry_client(ref.registry)
            with signer:
                signed = _sign_phase("gpu-preflight", signing, report, signer, ref, digest,
                                     kube)
    _finish(report, json_output, signed)


@cluster_app.command("recreate")
@guarded
def cluster_recreate(
    pod_file: Path = typer.Argument(..., help="Pod manifest (YAML or JSON)."),
    timeout: float = typer.Option(120, help="Seconds to wait for the old Pod to be gone."),
    kubeconfig: Path = KubeconfigOpt,
    json_output: bool = JsonOpt,
) -> None:
    """Replace a Pod whose immutable fields (nodeSelector…) change: delete the old one (that
    uid only), watch until it is really gone, then create — 409s are looked at, not retried
    blindly."""
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.podfile import load_pod_file
    from imagekit.cluster.pods import recreate_pod
    from imagekit.inputs import positive

    timeout = positive(timeout, "--timeout", maximum=86400)
    pod = load_pod_file(pod_file, need_name=True)
    with Kube(_kubeconfig(kubeconfig)) as kube:
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
        _say(f"created {doc['namespace']}/{doc['pod']} uid {doc['uid']} ({replaced})")
        for conflict in outcome.conflicts:
            _say(f"  {conflict}")
