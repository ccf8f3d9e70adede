"""The engine server Pod: launch.sh from a ConfigMap, the serve settings as env, a startupProbe
sized from observed startup phases, an exec readinessProbe.

The env carries exactly launch.sh's variables (so `imagekit serve-command` with the same env
prints what the Pod will run); EXECUTE=1 makes launch.sh exec the engine. Probes are exec
(python3 urllib against 127.0.0.1): they work on nodes without a Pod network and need no curl
in the image.
"""

from __future__ import annotations

from pathlib import Path

from imagekit.cluster import manifests
from imagekit.launch.budget import ProbeBudget
from imagekit.launch.command import ServeConfig, readiness_path
from imagekit.oci import ImageReference


def serve_env(config: ServeConfig) -> list[dict[str, str]]:
    env = {"ENGINE": config.engine.value, "MODEL_PATH": config.model_path, "TP": str(config.tp),
           "MAX_CONTEXT": str(config.max_context), "MAX_REQUESTS": str(config.max_requests),
           "DISABLE_PIECEWISE_CUDA_GRAPH": "1" if config.disable_piecewise_cuda_graph else "0",
           "HOST": config.host, "PORT": str(config.effective_port)}
    if config.served_model_name:
        env["SERVED_MODEL_NAME"] = config.served_model_name
    if config.prefill_switch:   # the spelling the image's own parser chose (serve_args)
        env["PREFILL_SWITCH"] = config.prefill_switch
    return [{"name": k, "value": v} for k, v in env.items()]


def health_command(config: ServeConfig) -> list[str]:
    url = f"http://127.0.0.1:{config.effective_port}{readiness_path(config.engine)}"
    return ["python3", "-c", f"import urllib.request as u; u.urlopen({url!r}, timeout=4)"]


def engine_pod(config: ServeConfig, image: ImageReference | str, startup: ProbeBudget, *,
               name: str, namespace: str, node_selector: dict[str, str] | None = None,
               tolerations: list[dict] | None = None, priority_class_name: str | None = None,
               pull_secrets: list[str] | None = None, model_claim: str | None = None,
               deadline_seconds: int = 7 * 24 * 3600, gpus: int | None = None,
               extra_env: dict[str, str] | None = None,
               labels: dict[str, str] | None = None,
               template_dir: Path | None = None) -> tuple[dict, dict]:
    """(Pod, ConfigMap) for one engine server; the image must be pinned by digest.

    `gpus`: nvidia.com/gpu to request (default: TP; 0 on a CPU platform). `extra_env`: more
    environment for the engine (e.g. VLLM_TARGET_DEVICE=cpu), never launch.sh's own variables.
    The config's extra engine arguments become the container's args, which launch.sh appends
    to the engine command as they are."""
    own = {e["name"] for e in serve_env(config)} | {"EXECUTE"}
    clash = sorted(own & set(extra_env or {}))
    if clash:
        from imagekit.errors import InvalidInput
        raise InvalidInput(f"engine env may not override launch.sh's variables: "
                           f"{', '.join(clash)}; use the serve settings")
    configmap = manifests.configmap(f"{name}-launch", namespace,
                                    manifests.script_files("launch.sh",
                                                           template_dir=template_dir),
                                    labels={"imagekit.dev/role": "engine-server"})
    pod = manifests.render(
        "engine-server.yaml.j2", template_dir=template_dir, name=name, namespace=namespace,
        image=image,
        engine=config.engine.value, node_selector=node_selector or {},
        tolerations=tolerations if tolerations is not None else [manifests.GPU_TOLERATION],
        priority_class_name=priority_class_name, pull_secrets=pull_secrets or [],
        env=[*serve_env(config), {"name": "EXECUTE", "value": "1"},
             *({"name": k, "value": v} for k, v in (extra_env or {}).items())],
        args=list(config.extra_args), labels=labels or {},
        port=config.effective_port, gpus=config.tp if gpus is None else gpus, startup=startup,
        health_command=health_command(config), configmap=configmap["metadata"]["name"],
        deadline_seconds=deadline_seconds, model_claim=model_claim,
        model_mount=config.model_path)
    return pod, configmap
