"""Render the Pod templates under manifests/ into API objects (dicts).

Templates are YAML with Jinja2 placeholders; every value goes through `tojson`, so a value can
never inject YAML structure. What a template renders is checked against the Kubernetes 1.37
API's models (`apimodels`) before it is returned. Every image is pinned: a reference without
`@sha256:…` is refused, and the tag is dropped from what the Pod runs (containerd verifies the
manifest against the digest; a tag could move between check and run).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import yaml

from imagekit import packaged
from imagekit.cluster import apimodels
from imagekit.errors import InvalidInput
from imagekit.oci import ImageReference


def manifests_dir(given: Path | None = None) -> Path:
    """Where the templates and scripts live: `given` (the CLI passes $IMAGEKIT_MANIFESTS_DIR,
    imagekit.settings), else the packaged ones (manifests, shipped in the
    wheel). Looked up when a template is rendered, not at import."""
    return Path(given or packaged.path("manifests"))


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

#: The user every Pod imagekit creates runs as: not root, with no passwd entry needed (the
#: distroless "nonroot" id). Images built as root run unchanged: their files are readable by
#: anyone, and what a run writes goes to emptyDirs (HOME and TMPDIR are /tmp, a fresh emptyDir).
RUN_AS_USER = 65532
#: Pod Security Standard "restricted" (docs/reference/rbac.md "Pod Security"): not root, the
#: runtime's default seccomp profile; fsGroup makes the emptyDirs and a claim writable to it.
POD_SECURITY_CONTEXT = {"runAsNonRoot": True, "runAsUser": RUN_AS_USER,
                        "runAsGroup": RUN_AS_USER, "fsGroup": RUN_AS_USER,
                        "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY_CONTEXT = {"allowPrivilegeEscalation": False,
                              "capabilities": {"drop": ["ALL"]}}
#: where a non-root run writes: HOME, caches and temporary files in one emptyDir
SCRATCH_ENV = [{"name": "HOME", "value": "/tmp"}, {"name": "TMPDIR", "value": "/tmp"},
               {"name": "XDG_CACHE_HOME", "value": "/tmp/.cache"}]
SCRATCH_VOLUME = {"name": "scratch", "emptyDir": {}}
SCRATCH_MOUNT = {"name": "scratch", "mountPath": "/tmp"}


def pinned(image: ImageReference | str) -> str:
    """`registry/repo@sha256:…` — the only form a Pod template accepts."""
    ref = image if isinstance(image, ImageReference) else ImageReference.parse(image)
    if ref.digest is None:
        raise InvalidInput("a Pod image must be pinned by digest (repo@sha256:…); resolve the "
                           "tag first", where=str(ref))
    return f"{ref.name}@{ref.digest}"


def _env(template_dir: Path | None = None) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(manifests_dir(template_dir))),
                              undefined=jinja2.StrictUndefined, autoescape=False,
                              keep_trailing_newline=True)


def render(template: str, *, template_dir: Path | None = None, **values: Any) -> dict:
    """Render `manifests/<template>` with `values`; `image` is pinned first. `template_dir`:
    the templates' folder (default the packaged manifests)."""
    if "image" in values:
        values["image"] = pinned(values["image"])
    values.setdefault("pull_secrets", [])
    values.setdefault("pod_security_context", POD_SECURITY_CONTEXT)
    values.setdefault("container_security_context", CONTAINER_SECURITY_CONTEXT)
    values.setdefault("scratch_env", SCRATCH_ENV)
    values["pull_secrets"] = [s if isinstance(s, dict) else {"name": s}
                              for s in values["pull_secrets"]]
    try:
        text = _env(template_dir).get_template(template).render(**values)
    except jinja2.TemplateNotFound:
        raise InvalidInput("no such manifest template",
                           where=str(manifests_dir(template_dir) / template)) from None
    except jinja2.UndefinedError as exc:
        raise InvalidInput(f"manifest template value missing: {exc.message}",
                           where=template) from None
    obj = yaml.safe_load(text)
    if not isinstance(obj, dict) or "kind" not in obj:
        raise InvalidInput("template did not render one Kubernetes object", where=template)
    # the templates' folder may be the user's own: a misspelled or removed field would be
    # dropped by the server without a word, so it is refused here, before the Pod is created
    apimodels.require_valid(obj, where=str(manifests_dir(template_dir) / template))
    return obj


def configmap(name: str, namespace: str, files: dict[str, str], labels: dict | None = None
              ) -> dict:
    """A ConfigMap holding scripts (keys are file names; no '/' allowed by the API)."""
    for key in files:
        if "/" in key or not key:
            raise InvalidInput("ConfigMap keys are plain file names", where=key)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "imagekit",
                                    **(labels or {})}},
            "data": dict(files)}


def script_files(*relative: str, template_dir: Path | None = None) -> dict[str, str]:
    """Read scripts from manifests/ (or `template_dir`) by relative path; keyed by their base
    name."""
    out = {}
    for rel in relative:
        path = manifests_dir(template_dir) / rel
        out[path.name] = path.read_text()
    return out


def controller_bundle(name: str, namespace: str, image: ImageReference | str,
                      scripts: dict[str, str] | None = None, env: dict[str, str] | None = None,
                      *, node_selector: dict[str, str] | None = None,
                      tolerations: list[dict] | None = None, pull_secrets: list[str] | None = None,
                      deadline_seconds: int = 6 * 3600,
                      template_dir: Path | None = None) -> tuple[dict, dict]:
    """(Pod, ConfigMap) of the acceptance controller: manifests/controller/controller.py plus
    `scripts` (sub-scripts it starts, e.g. the acceptance suite; SUBSCRIPTS in `env` names the
    order), all from one ConfigMap mounted at /opt/controller."""
    files = script_files("controller/controller.py", "controller/smoke.py",
                         template_dir=template_dir)
    files.update(scripts or {})
    cm = configmap(f"{name}-scripts", namespace, files,
                   labels={"imagekit.dev/role": "acceptance-controller"})
    pod = render("controller-pod.yaml.j2", template_dir=template_dir, name=name,
                 namespace=namespace, image=image,
                 node_selector=node_selector or {},
                 tolerations=tolerations if tolerations is not None else [GPU_TOLERATION],
                 pull_secrets=pull_secrets or [], configmap=cm["metadata"]["name"],
                 env=[{"name": k, "value": v} for k, v in (env or {}).items()],
                 deadline_seconds=deadline_seconds)
    return pod, cm
