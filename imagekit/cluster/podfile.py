"""Read a Pod manifest given by the user (YAML or JSON), checked before any API call.

kubectl refuses an alias bomb in 0.07 s; so do we (aliases are refused outright, see
imagekit.inputs.load_yaml). The shape is checked as far as imagekit reads it: one Pod, named
per DNS-1123, `spec.containers` a non-empty list of mappings with names and images, GPU
requests that are small non-negative integers; then every field against the Kubernetes 1.37
API's models (`apimodels`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imagekit.cluster import apimodels
from imagekit.errors import InvalidInput
from imagekit.inputs import dns_label, dns_subdomain, load_yaml, read_text

GPU = "nvidia.com/gpu"
MAX_CONTAINERS = 64


def _at(where: str, message: str) -> InvalidInput:
    return InvalidInput(f"pod file: {message}", where=where)


def check_pod(pod: Any, where: str, *, need_name: bool = False) -> dict:
    """The Pod mapping, or InvalidInput naming the first field that is wrong."""
    if not isinstance(pod, dict) or pod.get("kind") != "Pod":
        raise _at(where, "must hold one Pod (kind: Pod)")
    metadata = pod.get("metadata", {})
    if not isinstance(metadata, dict):
        raise _at(where, "metadata must be a mapping")
    name = metadata.get("name")
    if need_name and not name:
        raise _at(where, "metadata.name is required")
    try:
        if name is not None:
            dns_subdomain(name, "metadata.name")
        if metadata.get("namespace") is not None:
            dns_label(metadata["namespace"], "metadata.namespace")
    except InvalidInput as exc:
        raise _at(where, exc.message) from None
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise _at(where, "spec must be a mapping")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        raise _at(where, f"spec.containers must be a non-empty list, not {containers!r:.40}")
    if len(containers) > MAX_CONTAINERS:
        raise _at(where, f"spec.containers holds more than {MAX_CONTAINERS} containers")
    for index, container in enumerate(containers):
        if not isinstance(container, dict) or not container.get("name") or \
                not isinstance(container.get("image"), str):
            raise _at(where, f"spec.containers[{index}] must be a mapping with name and image")
        resources = container.get("resources", {}) or {}
        if not isinstance(resources, dict):
            raise _at(where, f"spec.containers[{index}].resources must be a mapping")
        for part in ("limits", "requests"):
            values = resources.get(part, {}) or {}
            if not isinstance(values, dict):
                raise _at(where, f"spec.containers[{index}].resources.{part} must be a mapping")
            gpus = values.get(GPU)
            if gpus is not None and (isinstance(gpus, bool) or not str(gpus).isdigit()
                                     or int(str(gpus)) > 1024):
                raise _at(where, f"spec.containers[{index}].resources.{part}.{GPU} must be a "
                                 f"whole number of GPUs (0-1024), not {gpus!r:.40}")
    for key in ("nodeSelector",):
        if spec.get(key) is not None and not isinstance(spec[key], dict):
            raise _at(where, f"spec.{key} must be a mapping")
    if spec.get("tolerations") is not None and (
            not isinstance(spec["tolerations"], list)
            or not all(isinstance(t, dict) for t in spec["tolerations"])):
        raise _at(where, "spec.tolerations must be a list of mappings")
    return pod


def load_pod_file(path: Path, *, need_name: bool = False) -> dict:
    """The Pod in `path` (UTF-8, at most 4 MiB, YAML without aliases, JSON being YAML)."""
    text = read_text(path, "pod file")
    pod = check_pod(load_yaml(text, str(path), what="pod file"), str(path), need_name=need_name)
    # a field the server does not know would be dropped without a word (a misspelled
    # runAsNonRoot): refused here, field by field against the 1.37 API's models
    apimodels.require_valid(pod, where=str(path))
    return pod
