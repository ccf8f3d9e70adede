"""Manifests checked, field by field, against the typed models of the Kubernetes 1.37 API.

Why: an API server drops a field it does not know (before 1.25 without a word, after it with
at most a warning unless the request asks for strict validation), so a misspelled
`runAsNonRot` in a Pod template gives a Pod without that guard, and a field a newer API removed
(`metadata.clusterName`, `spec.topologyKeys` of a Service) is kept by an old server and
dropped by a new one. The local cluster is v1.20: it can show neither. The `kubernetes`
package (release 37, the 1.37 OpenAPI) carries every kind as a model whose `attribute_map`
names each JSON field and whose `openapi_types` gives its type; `check_manifest` walks a
manifest dict through them:

- an unknown or misspelled field, at any depth: `spec.containers[0].securityContext.runAsNonRot:
  unknown field` (with the nearest known name when one is close);
- a wrong type: a string where the API wants an int, a dict where it wants a list, a bool given
  as a string, Secret `data` that is not base64;
- a required field missing or null (the model's required fields: `spec.containers`,
  `containers[].name`, a Job's `spec.template`, a RoleBinding's `roleRef`);
- quantities (`resources.limits`, `emptyDir.sizeLimit`, a volume's `capacity`) are strings or
  numbers in the Quantity syntax, and IntOrString fields (`targetPort`, probe ports) a string
  or an integer, as the API server decodes them.

What it does not judge: values (a port's range, a DNS-1123 name, an enum's members) and
cross-field rules; those are the API server's validation, which every create still meets.

When it runs: `manifests.render` checks every Pod template it renders, before that Pod is
created (`cluster probe`'s Secret and ConfigMap, made before, leave with the run), because the
templates' folder can be the user's own (`$IMAGEKIT_MANIFESTS_DIR`): a misspelled field there
is refused with one line naming its path, exit 2. The user's Pod file (`cluster recreate`,
`cluster precheck --pod-file`) is checked the same way when it is read (`podfile`). The objects the
flows build in code (Jobs, Services, ConfigMaps, Secrets, volumes, RBAC) are checked by the
tests over every render path (tests/unit/test_api_models.py). Cost, measured on a shared
2-core machine (load 1.5, four runs): importing `kubernetes` on top of what a cluster command
has already loaded (pydantic, httpx, yaml) takes 0.09-0.22 s, since the package imports its
configuration loaders, requests and urllib3 with it; the first check builds the models of a
Pod's tree, 0.13-0.22 s; every check after that is ~0.06 ms. A cluster command pays 0.2-0.45 s
once, next to Pod start-ups of seconds; `imagekit --help` and every command that renders no
template never import it (tests/unit/test_cli_startup.py).
"""

from __future__ import annotations

import base64
import binascii
import difflib
import functools
import re
import types
import typing
from collections.abc import Mapping
from typing import Any

from imagekit.errors import InvalidInput

#: (apiVersion, kind) -> the model class of the `kubernetes` package. The kinds imagekit
#: creates or prints, and their neighbours; a kind not here is a problem, never skipped.
KINDS: dict[tuple[str, str], str] = {
    ("v1", "Pod"): "V1Pod",
    ("v1", "Service"): "V1Service",
    ("v1", "ConfigMap"): "V1ConfigMap",
    ("v1", "Secret"): "V1Secret",
    ("v1", "Namespace"): "V1Namespace",
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("v1", "PersistentVolume"): "V1PersistentVolume",
    ("v1", "PersistentVolumeClaim"): "V1PersistentVolumeClaim",
    ("v1", "Endpoints"): "V1Endpoints",
    ("v1", "Node"): "V1Node",
    ("batch/v1", "Job"): "V1Job",
    ("batch/v1", "CronJob"): "V1CronJob",
    ("apps/v1", "Deployment"): "V1Deployment",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
    ("apps/v1", "StatefulSet"): "V1StatefulSet",
    ("rbac.authorization.k8s.io/v1", "Role"): "V1Role",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "V1RoleBinding",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("scheduling.k8s.io/v1", "PriorityClass"): "V1PriorityClass",
    ("authorization.k8s.io/v1", "SelfSubjectAccessReview"): "V1SelfSubjectAccessReview",
}

#: Fields whose OpenAPI type is `resource.Quantity`: the generated models flatten it to a
#: string, the API server decodes a JSON string or number (`cpu: 1`, `memory: 8Gi`).
QUANTITIES: dict[str, frozenset[str]] = {
    "V1ResourceRequirements": frozenset({"limits", "requests"}),
    "V1VolumeResourceRequirements": frozenset({"limits", "requests"}),
    "V1EmptyDirVolumeSource": frozenset({"size_limit"}),
    "V1PersistentVolumeSpec": frozenset({"capacity"}),
    "V1PersistentVolumeClaimStatus": frozenset({"capacity", "allocated_resources"}),
    "V1ResourceFieldSelector": frozenset({"divisor"}),
    "V1PodSpec": frozenset({"overhead"}),
    "V1Overhead": frozenset({"pod_fixed"}),
    "V1ResourceQuotaSpec": frozenset({"hard"}),
    "V1ResourceQuotaStatus": frozenset({"hard", "used"}),
    "V1LimitRangeItem": frozenset({"default", "default_request", "max",
                                   "max_limit_request_ratio", "min"}),
    "V1NodeStatus": frozenset({"allocatable", "capacity"}),
    "V1ContainerStatus": frozenset({"allocated_resources"}),
}

#: The API server's Quantity syntax (k8s.io/apimachinery/pkg/api/resource): a signed decimal
#: with a binary (Ki…Ei) or decimal (n…E) suffix, or a decimal exponent.
_QUANTITY = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})")
_LIST = re.compile(r"List\[(.+)\]")
_DICT = re.compile(r"Dict\[str, (.+)\]")


class ManifestRejected(InvalidInput):
    """A manifest the Kubernetes 1.37 API would refuse, or whose fields it would drop."""


@functools.cache
def _models() -> types.ModuleType:
    """The package's models module: imported on first use, so that a command which checks
    nothing never pays for it (0.4-0.5 s)."""
    import kubernetes.client.models

    return kubernetes.client.models


def _model(name: str) -> Any:
    return getattr(_models(), name, None)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def _base_types(annotation: Any) -> set[Any]:
    """The plain types a field's annotation allows (Optional, Annotated and Union unwrapped)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _base_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        out: set[Any] = set()
        for arg in typing.get_args(annotation):
            out |= _base_types(arg)
        return out
    return {annotation}


@functools.cache
def _is_int_or_string(model: str, attribute: str) -> bool:
    """`object` in openapi_types covers both free JSON and IntOrString; the field's pydantic
    annotation (int | str) tells them apart."""
    field = _model(model).model_fields[attribute]
    return _base_types(field.annotation) - {type(None)} == {int, str}


@functools.cache
def _fields(model: str) -> tuple[dict[str, tuple[str, str]], frozenset[str]]:
    """(JSON name -> (attribute, type string), the attributes that are required)."""
    cls = _model(model)
    by_json = {json: (attr, cls.openapi_types[attr]) for attr, json in cls.attribute_map.items()}
    required = frozenset(attr for attr, field in cls.model_fields.items()
                         if attr in cls.attribute_map and field.is_required())
    return by_json, required


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _walk_object(value: Any, model: str, path: str, problems: list[str]) -> None:
    if not isinstance(value, Mapping):
        problems.append(f"{path or '(manifest)'}: expected an object, got {_json_type(value)}")
        return
    fields, required = _fields(model)
    for key, item in value.items():
        where = _join(path, str(key))
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.8)
            problems.append(f"{where}: unknown field"
                            + (f" (did you mean {close[0]}?)" if close else ""))
            continue
        attribute, type_string = fields[key]
        if item is None:
            continue  # null is "not set" to the API server; a required one is named below
        quantity = attribute in QUANTITIES.get(model, ())
        _walk(item, type_string, where, problems, model=model, attribute=attribute,
              quantity=quantity)
    for attribute in sorted(required):
        json_name = _model(model).attribute_map[attribute]
        if value.get(json_name) is None:
            problems.append(f"{_join(path, json_name)}: required field missing")


def _walk(value: Any, type_string: str, path: str, problems: list[str], *, model: str,
          attribute: str, quantity: bool) -> None:
    """One value against one openapi_types entry."""
    if (inner := _LIST.fullmatch(type_string)) is not None:
        if not isinstance(value, list):
            problems.append(f"{path}: expected a list, got {_json_type(value)}")
            return
        for index, item in enumerate(value):
            if item is None:
                problems.append(f"{path}[{index}]: null in a list")
                continue
            _walk(item, inner[1], f"{path}[{index}]", problems, model=model,
                  attribute=attribute, quantity=quantity)
        return
    if (inner := _DICT.fullmatch(type_string)) is not None:
        if not isinstance(value, Mapping):
            problems.append(f"{path}: expected an object (a map), got {_json_type(value)}")
            return
        for key, item in value.items():
            if not isinstance(key, str):
                problems.append(f"{path}: key {key!r} is not a string")
                continue
            if item is None:
                continue
            _walk(item, inner[1], f"{path}[{key}]", problems, model=model,
                  attribute=attribute, quantity=quantity)
        return
    problem = _scalar(value, type_string, model, attribute, quantity)
    if problem == "model":
        _walk_object(value, type_string, path, problems)
    elif problem:
        problems.append(f"{path}: {problem}")


def _scalar(value: Any, type_string: str, model: str, attribute: str, quantity: bool
            ) -> str | None:
    """What is wrong with a scalar (None: nothing); "model" when `type_string` is a model."""
    got = _json_type(value)
    if type_string == "str":
        if quantity:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                return f"expected a quantity (string or number), got {got}"
            if isinstance(value, str) and not _QUANTITY.fullmatch(value):
                return f"{value!r} is not a quantity (e.g. 500m, 2, 8Gi)"
            return None
        return None if isinstance(value, str) else f"expected a string, got {got} ({value!r})"
    if type_string == "int":
        return None if got == "int" else f"expected an integer, got {got} ({value!r})"
    if type_string == "float":
        return None if got in ("int", "float") else f"expected a number, got {got} ({value!r})"
    if type_string == "bool":
        return None if got == "bool" else f"expected true or false, got {got} ({value!r})"
    if type_string == "datetime":
        if isinstance(value, str) and _RFC3339.fullmatch(value):
            return None
        return f"expected an RFC 3339 time, got {got} ({value!r})"
    if type_string == "bytes":
        if not isinstance(value, str):
            return f"expected base64 text, got {got}"
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return "not valid base64"
        return None
    if type_string == "object":
        if _is_int_or_string(model, attribute) and got not in ("int", "string"):
            return f"expected an integer or a string, got {got} ({value!r})"
        return None  # free JSON (a RawExtension, a CRD schema's default)
    if _model(type_string) is not None:
        return "model"
    return f"no model {type_string} in the kubernetes package (cannot check)"


def model_for(api_version: str, kind: str) -> str | None:
    """The model class name of (apiVersion, kind), or None when KINDS has none."""
    return KINDS.get((api_version, kind))


def check_manifest(obj: Any) -> list[str]:
    """Every problem of one manifest against the 1.37 models, each `path: what`; [] when
    the API would take every field as written."""
    if not isinstance(obj, Mapping):
        return [f"(manifest): expected an object, got {_json_type(obj)}"]
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["apiVersion, kind: both required, as strings"]
    model = model_for(api_version, kind)
    if model is None:
        return [f"apiVersion, kind: no 1.37 model known here for {api_version} {kind}"]
    problems: list[str] = []
    _walk_object(obj, model, "", problems)
    return problems


def require_valid(obj: Any, *, where: str) -> None:
    """Raise `ManifestRejected` (exit 2) naming the first problems of `obj`."""
    problems = check_manifest(obj)
    if problems:
        name = ""
        if isinstance(obj, Mapping):
            name = f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name', '')}".strip()
        shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more"
                                            if len(problems) > 3 else "")
        raise ManifestRejected(f"{name or 'manifest'} does not fit the Kubernetes 1.37 API: "
                               f"{shown}", where=where)
