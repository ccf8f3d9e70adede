"""API discovery, as client-go's `discovery` and the Python client's `DynamicClient` do it:
the server says which resources it serves, under which plural, and whether they are
namespaced (`GET /api/v1`, `GET /apis/<group>/<version>`: the APIResourceList). Nothing here
is a hand-written kind→plural table.

One resource list per group-version, fetched the first time a kind of it is used and kept for
the life of the `Discovery` (one per `Kube`, i.e. per run): a `cluster probe` asks for `v1`
once (a few ms on loopback), a GPU job also for `batch/v1`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from imagekit.kube.errors import NotFound, UnknownResource

#: the only two path roots of the API (core group, named groups); everything else builds on
#: `ResourceInfo.path`
CORE_ROOT, GROUPS_ROOT = "/api", "/apis"


class ResourceInfo(BaseModel):
    """One entry of an APIResourceList: what a kind is called in paths."""

    model_config = ConfigDict(frozen=True)

    api_version: str            # "v1", "batch/v1"
    kind: str                   # "Pod"
    plural: str                 # "pods"
    namespaced: bool
    verbs: tuple[str, ...] = ()

    def path(self, name: str | None = None, namespace: str | None = None,
             subresource: str | None = None) -> str:
        """The URL path of the collection, or of one object (and its subresource). A
        namespaced kind without a namespace is the all-namespaces collection."""
        root = group_version_root(self.api_version)
        scope = f"/namespaces/{namespace}" if self.namespaced and namespace else ""
        path = f"{root}{scope}/{self.plural}"
        if name is not None:
            path += f"/{name}"
            if subresource:
                path += f"/{subresource}"
        return path


def group_version_root(api_version: str) -> str:
    """`/api/v1` for the core group, `/apis/<group>/<version>` otherwise."""
    if "/" in api_version:
        return f"{GROUPS_ROOT}/{api_version}"
    return f"{CORE_ROOT}/{api_version}"


class Discovery:
    """Kind → `ResourceInfo` per group-version, asked of the server once each.

    `fetch(path)` returns the decoded JSON of a GET (the transport's own, with its
    credentials and typed errors)."""

    def __init__(self, fetch: Callable[[str], dict]) -> None:
        self._fetch = fetch
        self._lists: dict[str, dict[str, ResourceInfo]] = {}
        self._lock = threading.Lock()
        self.requests = 0   # how many resource lists were fetched (tests, the docs' figures)

    def resources(self, api_version: str) -> dict[str, ResourceInfo]:
        """Every top-level resource (no subresources) of one group-version, by kind."""
        with self._lock:
            known = self._lists.get(api_version)
            if known is not None:
                return known
            try:
                body = self._fetch(group_version_root(api_version))
            except NotFound:
                raise UnknownResource(f"the API server serves no {api_version}",
                                      where=group_version_root(api_version)) from None
            self.requests += 1
            found: dict[str, ResourceInfo] = {}
            for entry in body.get("resources", []):
                name = entry.get("name", "")
                if "/" in name or not entry.get("kind"):
                    continue   # pods/log, pods/status: subresources
                found.setdefault(entry["kind"], ResourceInfo(
                    api_version=api_version, kind=entry["kind"], plural=name,
                    namespaced=bool(entry.get("namespaced")),
                    verbs=tuple(entry.get("verbs", ()))))
            self._lists[api_version] = found
            return found

    def resolve(self, kind: str, api_version: str = "v1") -> ResourceInfo:
        found = self.resources(api_version).get(kind)
        if found is None:
            raise UnknownResource(f"the API server serves no kind {kind!r} in {api_version}",
                                  where=group_version_root(api_version))
        return found
