"""The model on a volume, as in the record (section 6): a PersistentVolume holding the model and
a read-only PersistentVolumeClaim bound to it, mountable only on nodes that carry the storage
capability label.

On a production cluster the volume is a CSI share (CFS Turbo) that only nodes with the kernel
module can mount; a Pod placed elsewhere fails at `MountVolume.MountDevice` — the node, not a
missing model. Here the same shape is a `local` PersistentVolume (a directory on the node, e.g.
the stand-in model under /var/lib/imagekit/models) whose `nodeAffinity` requires the label
`imagekit.dev/model-storage`: the scheduler refuses any other node, and `cluster precheck`
names such a node before anything is submitted (`volume_node_affinity`).
"""

from __future__ import annotations

import contextlib

from pydantic import BaseModel, ConfigDict

from imagekit.errors import ImagekitError, InvalidInput, NotFound
from imagekit.kube import Conflict, Kube
from imagekit.kube.watch import wait_for

#: The storage capability label a node must carry to mount the model volume.
STORAGE_LABEL_KEY = "imagekit.dev/model-storage"
STORAGE_LABEL_VALUE = "local"


class ModelVolume(BaseModel):
    """What `ensure_model_volume` made (or found)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    volume: str
    claim: str
    namespace: str
    path: str
    label: str  # key=value the node needs


def storage_label(key: str = STORAGE_LABEL_KEY, value: str = STORAGE_LABEL_VALUE) -> str:
    return f"{key}={value}"


def volume_manifests(volume: str, claim: str, namespace: str, path: str, *,
                     label_key: str = STORAGE_LABEL_KEY,
                     label_value: str = STORAGE_LABEL_VALUE,
                     size: str = "1Gi") -> tuple[dict, dict]:
    """(PersistentVolume, PersistentVolumeClaim): pre-bound to each other (claimRef and
    volumeName), no storage class, ReadOnlyMany, reclaim Retain (the model is never deleted
    with the claim)."""
    if not path.startswith("/"):
        raise InvalidInput("the model volume's path must be absolute", where=path)
    managed = {"app.kubernetes.io/managed-by": "imagekit", "imagekit.dev/role": "model"}
    pv = {"apiVersion": "v1", "kind": "PersistentVolume",
          "metadata": {"name": volume, "labels": managed},
          "spec": {"capacity": {"storage": size}, "accessModes": ["ReadOnlyMany"],
                   "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "",
                   "volumeMode": "Filesystem", "local": {"path": path},
                   "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                "namespace": namespace, "name": claim},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": label_key, "operator": "In", "values": [label_value]}]}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
           "metadata": {"name": claim, "namespace": namespace, "labels": managed},
           "spec": {"accessModes": ["ReadOnlyMany"], "storageClassName": "",
                    "volumeName": volume, "volumeMode": "Filesystem",
                    "resources": {"requests": {"storage": size}}}}
    return pv, pvc


def ensure_model_volume(kube: Kube, volume: str, claim: str, namespace: str, path: str, *,
                        timeout: float = 60) -> ModelVolume:
    """Create the PV and the PVC unless they exist (same names), wait until the claim is
    Bound. An existing PV of that name holding another path is refused, never changed."""
    pv, pvc = volume_manifests(volume, claim, namespace, path)
    volumes, claims = kube.resource("PersistentVolume"), kube.resource("PersistentVolumeClaim")
    current = volumes.maybe_get(volume)
    if current is not None:
        held = (current.get("spec", {}).get("local") or {}).get("path")
        if held != path:
            raise InvalidInput(f"PersistentVolume {volume} exists and holds {held!r}, not "
                               f"{path!r}; it is not changed", where=volume)
    else:
        with contextlib.suppress(Conflict):
            kube.create(pv)
    if not claims.exists(claim, namespace):
        with contextlib.suppress(Conflict):
            kube.create(pvc)
    wait_for(claims, claim, namespace,
             lambda pvc: True if (pvc or {}).get("status", {}).get("phase") == "Bound"
             else None, timeout=timeout,
             what=f"PersistentVolumeClaim {namespace}/{claim} to be Bound to {volume}")
    return ModelVolume(volume=volume, claim=claim, namespace=namespace, path=path,
                       label=storage_label())


def delete_model_volume(kube: Kube, volume: str, claim: str, namespace: str,
                        timeout: float = 60) -> dict[str, bool]:
    """Delete the claim and the volume object (the directory on the node stays: Retain) and
    wait until both are gone. Returns which of them existed ({"claim": …, "volume": …}), so
    that a --delete of objects that are not there does not say "deleted"."""
    volumes, claims = kube.resource("PersistentVolume"), kube.resource("PersistentVolumeClaim")
    existed = {"claim": claims.exists(claim, namespace), "volume": volumes.exists(volume)}
    if existed["claim"]:
        claims.delete(claim, namespace)
        wait_for(claims, claim, namespace, _gone, timeout=timeout,
                 what=f"PersistentVolumeClaim {namespace}/{claim} to be gone")
    if existed["volume"]:
        volumes.delete(volume)
        wait_for(volumes, volume, None, _gone, timeout=timeout,
                 what=f"PersistentVolume {volume} to be gone")
    return existed


def _gone(obj: dict | None) -> bool | None:
    return True if obj is None else None


def label_node(kube: Kube, node: str, key: str = STORAGE_LABEL_KEY,
               value: str | None = STORAGE_LABEL_VALUE) -> None:
    """Give `node` the storage capability label (value None: take it away). A node that does
    not exist is bad input naming the nodes there are: a node's name is often not the
    machine's host name (the local cluster's only node is 127.0.0.1)."""
    nodes = kube.resource("Node")
    try:
        nodes.patch(node, {"metadata": {"labels": {key: value}}})
    except NotFound:
        try:
            names = sorted(item["metadata"]["name"] for item in nodes.list())
            known = f"nodes: {', '.join(names)}" if names else "the cluster has no nodes"
        except ImagekitError as exc:   # not allowed to list them: say so, not a traceback
            known = f"the nodes could not be listed ({exc.one_line()})"
        raise InvalidInput(f'node "{node}" not found; {known}', where="--label-node") \
            from None


def claim_affinity(kube: Kube, namespace: str, claim: str) -> tuple[dict | None, str]:
    """The PV behind `claim` (None when the claim or its volume is missing) and a sentence
    saying what was found (for the finding when something is missing)."""
    pvc = kube.resource("PersistentVolumeClaim").maybe_get(claim, namespace)
    if pvc is None:
        return None, f"PersistentVolumeClaim {namespace}/{claim} does not exist"
    name = pvc.get("spec", {}).get("volumeName")
    if not name:
        return None, (f"PersistentVolumeClaim {namespace}/{claim} is not bound to a volume "
                      f"(phase {pvc.get('status', {}).get('phase')})")
    try:
        pv = kube.resource("PersistentVolume").get(name)
    except NotFound:
        return None, f"PersistentVolume {name} of claim {namespace}/{claim} does not exist"
    return pv, f"claim {namespace}/{claim} → PersistentVolume {name}"


def node_matches_affinity(pv: dict, labels: dict[str, str]) -> tuple[bool, list[str]]:
    """Does a node with `labels` satisfy the PV's required nodeAffinity (terms ORed,
    expressions ANDed; In/NotIn/Exists/DoesNotExist)? Returns (ok, what the node lacks)."""
    terms = (((pv.get("spec", {}).get("nodeAffinity") or {}).get("required") or {})
             .get("nodeSelectorTerms") or [])
    if not terms:
        return True, []
    lacking: list[str] = []
    for term in terms:
        missing = []
        for expr in term.get("matchExpressions") or []:
            key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
            have = labels.get(key)
            ok = {"In": have is not None and have in values,
                  "NotIn": have is None or have not in values,
                  "Exists": have is not None, "DoesNotExist": have is None}.get(op, False)
            if not ok:
                missing.append(f"{key} {op} {values}" if values else f"{key} {op}")
        if not missing:
            return True, []
        lacking.append(" and ".join(missing))
    return False, lacking
