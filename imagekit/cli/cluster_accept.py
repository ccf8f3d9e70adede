"""`imagekit cluster accept` and `imagekit cluster model-volume`: parse, hand over to
imagekit.clusteraccept, print. Nothing is judged or written here."""

from __future__ import annotations

from pathlib import Path

import typer

from imagekit.cli import trustopts
from imagekit.cli.app import evidence_store, guarded, print_json, progress_for, settings
from imagekit.cli.cluster import cluster_app
from imagekit.cli.common import (
    EvidenceDir,
    JsonOpt,
    KubeconfigOpt,
    SelectorOpt,
    SignKeyOpt,
    finish,
    images_spec,
    kubeconfig_path,
    registry_client,
    say,
    sign_phase,
)
from imagekit.cli.trustopts import TrustKeyOpt, TrustPolicyOpt
from imagekit.errors import InvalidInput


@cluster_app.command("accept")
@guarded
def cluster_accept(
    reference: str = typer.Argument(..., help="An image NAME of the spec (its latest verified "
                                              "build) or a reference by tag or digest."),
    namespace: str = typer.Option("imagekit", help="Namespace for the Pods (created when "
                                                   "missing)."),
    suite: list[str] = typer.Option(["functional"], "--suite",
                                    help="functional, media, needle (repeatable)."),
    matrix: Path = typer.Option(None, "--matrix", help="Load matrix TOML run after the "
                                                       "suites."),
    require: list[str] = typer.Option([], "--require-capability",
                                      help="A capability the served model must have: image, "
                                           "video, tools or ctx=N (repeatable)."),
    model_claim: str = typer.Option(None, "--model-claim", help="Read-only PVC holding the "
                                                               "model (mounted at /models/model)."),
    model_name: str = typer.Option(None, "--served-model-name",
                                   help="Name the engine serves the model as."),
    engine_config: Path = typer.Option(None, "--engine-config",
                                       help="Engine profiles TOML for the suites."),
    cases: str = typer.Option(None, "--cases",
                              help="Semantic cases: a shipped set (record, stand-in) or a "
                                   "cases FILE (default: the profile's, else record)."),
    engine: str = typer.Option("vllm", help="sglang or vllm."),
    platform: str = typer.Option("gpu", help="gpu (nvidia.com/gpu = TP) or cpu (vLLM's CPU "
                                             "platform selected explicitly, no GPU)."),
    tp: int = typer.Option(1, help="Tensor parallel size."),
    max_context: int = typer.Option(32768, help="Engine context length."),
    max_requests: int = typer.Option(8, help="Engine concurrent requests."),
    engine_env: list[str] = typer.Option(None, "--engine-env", help="KEY=VALUE for the engine "
                                                                    "(repeatable)."),
    engine_arg: list[str] = typer.Option(None, "--engine-arg", help="Extra engine argument "
                                                                    "(repeatable)."),
    startup_seconds: int = typer.Option(None, help="startupProbe budget (default: from the "
                                                   "last observed start, else 900)."),
    selector: list[str] = SelectorOpt,
    toleration: list[str] = typer.Option(None, "--toleration", help="key[=value]:Effect "
                                         "(default: tolerate nvidia.com/gpu)."),
    priority_class: str = typer.Option(None, help="An existing PriorityClass to use."),
    max_tokens: int = typer.Option(96, help="Output cap of the suites' requests (a "
                                   "random-weight stand-in is capped at 16)."),
    timeout: float = typer.Option(1800, "--run-timeout",
                                  help="Longest the whole run may take, in seconds."),
    keep: bool = typer.Option(False, "--keep", help="Leave the Pods, Service and ConfigMaps."),
    force_launch: str = typer.Option(None, "--force-launch", metavar="REASON",
                                     help="Launch even though this image's engine parser "
                                          "rejected the command or could not judge it; the "
                                          "reason is recorded."),
    spec_file: Path = typer.Option(None, "--spec", help="Images spec (default "
                                   "$IMAGEKIT_IMAGES_SPEC, ./dockerfiles/images.toml, else the "
                                   "packaged one)."),
    profile: str = typer.Option(None, help="Spec profile."),
    key: Path = SignKeyOpt,
    trust_key: list[Path] = TrustKeyOpt,
    trust_policy: Path = TrustPolicyOpt,
    kubeconfig: Path = KubeconfigOpt,
    evidence_dir: Path = EvidenceDir,
    json_output: bool = JsonOpt,
) -> None:
    """Accept an image on the cluster by tag: pin the digest, gate on its image-phase evidence
    (with --trust-key, where this store has none: the statements trusted keys signed there),
    precheck the engine Pod, start it (phases live from its log), run the suites from a
    controller Pod through a Service, file everything under the digest, delete it all."""
    from imagekit.acceptance.capabilities import Requirements
    from imagekit.acceptance.runner import SUITES
    from imagekit.attest.phase import load_signing_key
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.manifests import GPU_TOLERATION
    from imagekit.clusteraccept.run import (
        CPU_ENGINE_ARGS,
        CPU_ENGINE_ENV,
        AcceptOptions,
        run_accept,
    )
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
    from imagekit.launch.command import Engine
    from imagekit.names import digest_of, resolve_target
    from imagekit.report.gate import image_phase_gate

    signing = load_signing_key(key)   # a bad key is exit 2 before anything runs
    for each in suite:
        if each not in SUITES:
            raise InvalidInput(f"unknown suite {each!r}; use {', '.join(SUITES)}")
    if engine not in ("sglang", "vllm"):
        raise InvalidInput("engine must be sglang or vllm", where=engine)
    if platform not in ("gpu", "cpu"):
        raise InvalidInput("--platform is gpu or cpu", where=platform)
    if platform == "cpu" and engine != "vllm":
        raise InvalidInput("--platform cpu is vLLM's CPU platform", where=engine)
    Requirements.parse(",".join(require))
    dns_label(namespace, "--namespace")
    count(tp, "--tp", minimum=1, maximum=64)
    timeout = positive(timeout, "--run-timeout", maximum=7 * 86400)
    if startup_seconds is not None:
        count(startup_seconds, "--startup-seconds", minimum=1, maximum=7 * 24 * 3600)
    if force_launch is not None and len(force_launch.strip()) < 3:
        raise InvalidInput("--force-launch needs a reason (at least 3 characters)",
                           where=repr(force_launch))
    for value, what in ((model_claim, "--model-claim"), (priority_class, "--priority-class")):
        if value is not None:
            dns_subdomain(value, what)
    count(max_tokens, "--max-tokens", minimum=1, maximum=1 << 20)
    count(max_context, "--max-context", minimum=1, maximum=1 << 24)
    count(max_requests, "--max-requests", minimum=1, maximum=1 << 16)
    matrix_text = read_text(matrix, "load matrix") if matrix is not None else None
    if matrix is not None:
        from imagekit.acceptance import load_matrix
        load_matrix(matrix)
    config_text = read_text(engine_config, "engine config") if engine_config else None
    env = env_pairs(engine_env, "--engine-env")
    args = list(engine_arg or [])
    if platform == "cpu":
        env = {**CPU_ENGINE_ENV, **env}
        args = [*CPU_ENGINE_ARGS, *args]
    # every option before the gate and before any cluster contact (was: checked after the
    # gate, so a bad --selector read as a gate refusal)
    node_selector = label_pairs(selector, "--selector")
    tolerated = tolerations(toleration) or [GPU_TOLERATION]
    spec_path = images_spec(spec_file)  # --spec, else $IMAGEKIT_IMAGES_SPEC (the settings)
    if profile is not None:
        from imagekit.spec import load_spec

        _, chosen_profile = load_spec(spec_path).profile(profile)
        chosen = chosen_profile.cases
        if cases is None:   # the profile's set; its file is relative to the spec
            cases = chosen if not chosen.endswith(".toml") else str(
                Path(spec_path).absolute().parent / chosen)
    from imagekit.acceptance.cases import load as load_cases

    _, cases_text = load_cases(cases)
    kube_path = kubeconfig_path(kubeconfig)
    trust = trustopts.load(trust_key, trust_policy)
    store = evidence_store(evidence_dir)
    resolved = resolve_target(reference, spec_path=spec_path, store=store, profile=profile,
                              remote=trustopts.name_resolver(trust, store))
    ref = resolved.reference
    client, docker_config = registry_client(ref.registry)
    with client:
        digest = digest_of(client, ref)
    from imagekit.registry import ClientPool

    with ClientPool(trustopts.registry_options(ref.registry)) as reader:
        image_phase_gate(store, digest, profile=profile, trust=trust,   # exit 1: the reasons
                         required=settings().required_checks_list(),
                         pull=trustopts.puller(trust, ref, reader), spec_path=spec_path,
                         state_dir=settings().state_dir)
    options = AcceptOptions(
        namespace=namespace, engine=Engine(engine), model_claim=model_claim,
        served_model_name=model_name, tp=tp, gpus=0 if platform == "cpu" else tp,
        max_context=max_context, max_requests=max_requests, engine_env=env,
        engine_args=args, node_selector=node_selector, tolerations=tolerated,
        priority_class_name=priority_class, startup_seconds=startup_seconds,
        suites=list(dict.fromkeys(suite)), require=list(require), matrix_text=matrix_text,
        engine_config_text=config_text, cases_text=cases_text, max_tokens=max_tokens,
        docker_config_dir=docker_config, timeout_s=timeout, keep=keep,
        force_launch=force_launch.strip() if force_launch else None)

    def controller_image():
        from imagekit.clusteraccept.controller_image import ensure_controller_image
        from imagekit.engine import Engine as Docker
        from imagekit.infra.state import load_state

        staging = load_state(settings().state_dir).registry("staging").address
        return ensure_controller_image(Docker(), staging,
                                       cache_dir=settings().cache_dir,
                                       pip_cert=settings().pip_cert,
                                       mirror=settings().debian_mirror).pinned

    with progress_for(json_output), Kube(kube_path) as kube:
        report = run_accept(kube, ref, digest, options, store,
                            controller_image=controller_image,
                            manifests_dir=settings().manifests_dir,
                            probes_dir=settings().probes_dir)
        signed = None
        if signing is not None:
            signer, _ = registry_client(ref.registry)
            with signer:
                signed = sign_phase("cluster-accept", signing, report, signer, ref, digest,
                                    kube, profile=profile)
    finish(report, json_output, signed)


@cluster_app.command("model-volume")
@guarded
def cluster_model_volume(
    path: Path = typer.Option(None, help="Model directory on the node (default: the real "
                                         "instruct model, SmolLM2-135M-Instruct, built offline)."),
    volume: str = typer.Option("imagekit-model", help="PersistentVolume name."),
    claim: str = typer.Option("imagekit-model", help="PersistentVolumeClaim name."),
    namespace: str = typer.Option("imagekit", help="Namespace of the claim."),
    label_node: str = typer.Option(None, help="Give this node the storage capability label."),
    delete: bool = typer.Option(False, "--delete", help="Delete the claim and the volume."),
    kubeconfig: Path = KubeconfigOpt,
    json_output: bool = JsonOpt,
) -> None:
    """The model on a volume (record section 6): a local PersistentVolume that only nodes
    labelled imagekit.dev/model-storage=local can mount, and a read-only claim bound to it."""
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.modelvolume import delete_model_volume, ensure_model_volume
    from imagekit.cluster.modelvolume import label_node as give_label
    from imagekit.cluster.probe import ensure_namespace
    from imagekit.inputs import dns_label, dns_subdomain

    dns_label(namespace, "--namespace")
    dns_subdomain(volume, "--volume")
    dns_subdomain(claim, "--claim")
    if label_node is not None:  # '../namespaces/NS' would PATCH a Namespace
        dns_subdomain(label_node, "--label-node")
    if not delete:
        if path is None:
            path = _standin_snapshot()
        if not path.is_dir():
            raise InvalidInput("model directory not found", where=str(path))
    with Kube(kubeconfig_path(kubeconfig)) as kube:
        if delete:
            gone = delete_model_volume(kube, volume, claim, namespace)
            say(_deleted_line(gone, volume, claim, namespace))
            return
        if label_node:
            give_label(kube, label_node)
        ensure_namespace(kube, namespace)
        made = ensure_model_volume(kube, volume, claim, namespace, str(path.absolute()))
    if json_output:
        print_json(made)
    else:
        say(f"PersistentVolume {made.volume} ({made.path}, nodes with {made.label}) bound to "
             f"{made.namespace}/{made.claim} (ReadOnlyMany)")


def _deleted_line(gone, volume: str, claim: str, namespace: str) -> str:
    """What --delete did, object by object: `deleted` only for what was there."""
    if not isinstance(gone, dict):
        return f"deleted {namespace}/{claim} and {volume}"
    parts = [f"{what} {name}: {'deleted' if gone.get(what) else 'not found (nothing to delete)'}"
             for what, name in (("claim", f"{namespace}/{claim}"), ("volume", volume))]
    return "; ".join(parts)


def _standin_snapshot() -> Path:
    from imagekit.clusteraccept.model import instruct_model

    return instruct_model(settings().engines_dir, settings().models_dir)[0]
