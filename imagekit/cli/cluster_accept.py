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
from imagekit.cli.surface import option
from imagekit.cli.trustopts import TrustKeyOpt, TrustPolicyOpt
from imagekit.errors import InvalidInput


@cluster_app.command("accept")
@guarded
def cluster_accept(
    reference: str = typer.Argument(..., metavar="NAME|REF",
                                    help="An image NAME of the spec (its latest verified "
                                         "build) or a reference by tag or digest."),
    namespace: str = option("--namespace", note="Created when missing."),
    suite: list[str] = option("--suite"),
    matrix: Path = option("--matrix", note="Run after the suites."),
    require: list[str] = option("--require-capability"),
    model_claim: str = option("--model-claim", note="Mounted at /models/model."),
    model_name: str = option("--served-model-name"),
    engine_config: Path = option("--engine-config"),
    cases: str = option("--cases"),
    engine: str = option("--engine"),
    device: str = option("--device"),
    engine_env: list[str] = option("--engine-env", note="Or any of the engine's own; TP "
                                                        "defaults to 1, MAX_CONTEXT to 32768, "
                                                        "MAX_REQUESTS to 8 here."),
    engine_arg: list[str] = option("--engine-arg"),
    startup_seconds: int = option("--startup-seconds"),
    selector: list[str] = SelectorOpt,
    toleration: list[str] = option("--toleration"),
    priority_class: str = option("--priority-class"),
    max_tokens: int = option("--max-tokens"),
    timeout: float = option("--run-timeout"),
    keep: bool = option("--keep"),
    force_launch: str = option("--force-launch"),
    spec_file: Path = option("--spec"),
    profile: str = option("--profile"),
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
    suite = list(SUITES) if "all" in suite else suite
    for each in suite:
        if each not in SUITES:
            raise InvalidInput(f"unknown suite {each!r}; use {', '.join(SUITES)} or all")
    if engine not in (None, "sglang", "vllm"):
        raise InvalidInput("--engine is sglang or vllm", where=engine)
    if device not in ("gpu", "cpu"):
        raise InvalidInput("--device is gpu or cpu", where=device)
    Requirements.parse(",".join(require))
    dns_label(namespace, "--namespace")
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
    matrix_text = read_text(matrix, "load matrix") if matrix is not None else None
    if matrix is not None:
        from imagekit.acceptance import load_matrix
        if any(block.dataset for block in load_matrix(matrix).matrix):
            raise InvalidInput("a load matrix with a dataset runs from `imagekit bench` "
                               "beside the server: only the matrix text reaches the Pod, "
                               "not its dataset files", where=str(matrix))
    config_text = read_text(engine_config, "engine config") if engine_config else None
    env = env_pairs(engine_env, "--engine-env")
    tp, max_context, max_requests = launch_sizes(env)
    args = list(engine_arg or [])
    if device == "cpu":
        env = {**CPU_ENGINE_ENV, **env}
        args = [*CPU_ENGINE_ARGS, *args]
    # every option before the gate and before any cluster contact (was: checked after the
    # gate, so a bad --selector read as a gate refusal)
    node_selector = label_pairs(selector, "--selector")
    tolerated = tolerations(toleration) or [GPU_TOLERATION]
    spec_path = images_spec(spec_file)  # --spec, else $IMAGEKIT_IMAGES_SPEC (the settings)
    if cases is None:   # the profile's set (--profile, else the spec's default profile)
        from imagekit.spec import default_spec_path, load_spec

        spec_file_used = default_spec_path(spec_path)
        _, chosen_profile = load_spec(spec_file_used).profile(profile)
        chosen = chosen_profile.cases   # a shipped set's name, or a file beside the spec
        cases = chosen if not chosen.endswith(".toml") else str(
            spec_file_used.parent / chosen)
    from imagekit.acceptance.cases import load as load_cases

    _, cases_text = load_cases(cases)
    kube_path = kubeconfig_path(kubeconfig)
    trust = trustopts.load(trust_key, trust_policy)
    store = evidence_store(evidence_dir)
    resolved = resolve_target(reference, spec_path=spec_path, store=store, profile=profile,
                              remote=trustopts.name_resolver(trust, store))
    ref = resolved.reference
    engine = engine or engine_of(resolved)
    if device == "cpu" and engine != "vllm":
        raise InvalidInput("--device cpu is vLLM's CPU platform", where=engine)
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
        served_model_name=model_name, tp=tp, gpus=0 if device == "cpu" else tp,
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


#: launch.sh's sizes that `cluster accept` sets from --engine-env, their defaults and bounds
LAUNCH_SIZES = (("TP", 1, 64), ("MAX_CONTEXT", 32768, 1 << 24), ("MAX_REQUESTS", 8, 1 << 16))
#: launch variables that have their own option here
OWN_OPTIONS = {"ENGINE": "--engine", "SERVED_MODEL_NAME": "--served-model-name"}


def launch_sizes(env: dict[str, str]) -> tuple[int, int, int]:
    """TP, MAX_CONTEXT and MAX_REQUESTS taken out of --engine-env (launch.sh's variables: the
    run's serve settings, checked), their defaults where not given; a variable with its own
    option is refused, naming the option."""
    from imagekit.inputs import count

    for name, flag in OWN_OPTIONS.items():
        if name in env:
            raise InvalidInput(f"{name} is {flag} here, not --engine-env", where=name)
    sizes = []
    for name, default, maximum in LAUNCH_SIZES:
        text = env.pop(name, None)
        if text is None:
            sizes.append(default)
            continue
        try:
            value = int(text)
        except ValueError:
            raise InvalidInput(f"--engine-env {name} must be a whole number",
                               where=f"{name}={text}"[:80]) from None
        sizes.append(count(value, f"--engine-env {name}", minimum=1, maximum=maximum))
    return sizes[0], sizes[1], sizes[2]


def engine_of(resolved) -> str:  # noqa: ANN001 - imagekit.names.Target
    """The engine of the image to accept: its spec entry's, else the one its reference names
    (`…/vllm:v1`); neither: one line asking for --engine."""
    from imagekit.spec import KNOWN_ENGINES

    if resolved.image is not None:
        return str(resolved.image.engine)
    named = [engine for engine in KNOWN_ENGINES if engine in resolved.reference.repository]
    if len(named) == 1:
        return named[0]
    raise InvalidInput("cannot tell the engine of this image; pass --engine sglang or vllm",
                       where=resolved.given)


@cluster_app.command("model-volume")
@guarded
def cluster_model_volume(
    path: Path = option("--path"),
    volume: str = option("--volume"),
    claim: str = option("--model-claim", note="This command makes it (named imagekit-model "
                                              "when omitted)."),
    namespace: str = option("--namespace"),
    label_node: str = option("--label-node"),
    delete: bool = option("--delete"),
    kubeconfig: Path = KubeconfigOpt,
    json_output: bool = JsonOpt,
) -> None:
    """The model on a volume: a local PersistentVolume that only nodes labelled
    imagekit.dev/model-storage=local can mount, and a read-only claim bound to it."""
    from imagekit.cluster.kube import Kube
    from imagekit.cluster.modelvolume import delete_model_volume, ensure_model_volume
    from imagekit.cluster.modelvolume import label_node as give_label
    from imagekit.cluster.probe import ensure_namespace
    from imagekit.inputs import dns_label, dns_subdomain

    claim = claim if claim is not None else "imagekit-model"
    dns_label(namespace, "--namespace")
    dns_subdomain(volume, "--volume")
    dns_subdomain(claim, "--model-claim")
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
