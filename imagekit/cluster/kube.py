"""Kubernetes API transport: httpx against the API server, the kubeconfig read as client-go
reads it (`kubeconfig.py`), with credentials kept fresh (`kubeauth.py`).

Objects travel as plain dicts in the API's own camelCase JSON (what `kubectl get -o json`
shows), not as the generated model classes: a manifest rendered from a template goes in as it
is, and fields the client's models do not know (the server is v1.20, the client much newer)
are neither dropped nor invented.

API errors become imagekit errors with the server's own message, because that message is the
finding (the Priority admission plugin's 403 text, "object is being deleted", a 409):
403 → `AdmissionRefused`, 404 → `NotFound`, 409 → `Conflict`, 422 → `InvalidInput`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import stamina

from imagekit.errors import ImagekitError, InfraError, InvalidInput, NotFound, TransportError


class AdmissionRefused(ImagekitError):
    """The API server refused the object (HTTP 403): admission or authorization said no."""

    exit_code = 1


class Conflict(ImagekitError):
    """HTTP 409: an object of that name exists (possibly still Terminating)."""


def default_kubeconfig() -> Path:
    """$KUBECONFIG, else ~/.kube/config. (The CLI prefers the kubeconfig infra recorded; this
    transport layer does not read infra state.)"""
    import os
    env = os.environ.get("KUBECONFIG")
    if env:
        return Path(env.split(os.pathsep)[0])
    return Path.home() / ".kube" / "config"


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        return body.get("message") or response.reason_phrase
    except (ValueError, AttributeError):
        return response.text[:300] or response.reason_phrase


class Kube:
    """A connection to one cluster (kubeconfig file).

    The kubeconfig is read as client-go reads it (`kubeconfig.py`: current context, CA,
    client certificates, inline *-data fields); the user's credential is live
    (`kubeauth.py`): an exec plugin is re-run before its token expires and after a 401, a
    tokenFile is re-read when it changes. Requests go through httpx with that credential on
    each one, watches and log streams included.

    The objects this connection created and has not deleted are remembered (`left()`): when
    the run ends on a credential that cannot be renewed, the error says what stayed behind."""

    def __init__(self, kubeconfig: Path | str | None = None, *, context: str | None = None
                 ) -> None:
        from imagekit.cluster import kubeconfig as kubeconfig_file
        from imagekit.cluster.kubeauth import KubeAuth, source_for

        path = Path(kubeconfig) if kubeconfig else default_kubeconfig()
        if not path.is_file():
            raise InfraError("no kubeconfig; run `imagekit infra up --cluster` or pass "
                             "--kubeconfig", where=str(path))
        self.kubeconfig = path
        target = kubeconfig_file.load(path, context)
        self.user = target.user_name
        ssl_context = kubeconfig_file.ssl_context(target)
        self.credentials = source_for(target, ssl_context)
        self.credentials.current()  # a plugin that cannot run fails here, before any change
        self.host = target.cluster.server.rstrip("/")
        self._created: dict[str, str] = {}
        hooks = {}
        if target.cluster.tls_server_name:  # the name the server's certificate is checked for
            sni = target.cluster.tls_server_name
            hooks["request"] = [lambda request: request.extensions.setdefault("sni_hostname",
                                                                              sni)]
        self._http = httpx.Client(base_url=self.host, verify=ssl_context,
                                  auth=KubeAuth(self.credentials),
                                  headers={"Accept": "application/json"}, event_hooks=hooks,
                                  timeout=httpx.Timeout(30.0, connect=10.0), trust_env=False)

    def left(self) -> list[str]:
        """`Kind namespace/name` of what this connection created and did not delete."""
        return list(self._created.values())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Kube":
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        from imagekit.cluster.kubeauth import KubeCredentialError

        if isinstance(exc, KubeCredentialError) and self._created and \
                "left behind:" not in exc.message:
            exc.message += "; left behind (created by this run, not deleted): " + \
                ", ".join(self.left())
        self.close()

    # ---------------------------------------------------------------- raw calls
    def _raise_for(self, response: httpx.Response, where: str) -> None:
        if response.status_code < 400:
            return
        message = _message(response)
        status = response.status_code
        if status == 403:
            raise AdmissionRefused(message, where=where)
        if status == 404:
            raise NotFound(message, where=where)
        if status == 409:
            raise Conflict(message, where=where)
        if status == 422:
            raise InvalidInput(message, where=where)
        raise TransportError(f"API {status}: {message}", where=where)

    def request(self, method: str, path: str, *, body: Any = None,
                query: dict | None = None, where: str | None = None,
                timeout: float | None = None) -> httpx.Response:
        content_type = "application/merge-patch+json" if method == "PATCH" else \
            "application/json"
        def send() -> httpx.Response:
            return self._http.request(
                method, path, params=query or None,
                content=json.dumps(body).encode() if body is not None else None,
                headers={"Content-Type": content_type} if body is not None else None,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)

        try:
            if method == "GET":  # reads are safe to repeat over a dropped connection
                for attempt in stamina.retry_context(on=httpx.TransportError, attempts=3,
                                                     wait_initial=0.2, wait_max=2.0):
                    with attempt:
                        response = send()
            else:  # a write is never repeated blindly: the first one may have landed
                response = send()
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach the API server: {exc}", where=self.host) \
                from None
        self._raise_for(response, where or path)
        return response

    def call(self, method: str, path: str, body: Any = None, query: dict | None = None,
             where: str | None = None) -> dict:
        """One API request; returns the JSON body as a dict, or raises a mapped error."""
        response = self.request(method, path, body=body, query=query, where=where)
        return response.json() if response.content else {}

    def get(self, path: str, **query: Any) -> dict:
        return self.call("GET", path, query=query or None)

    def maybe_get(self, path: str) -> dict | None:
        try:
            return self.get(path)
        except NotFound:
            return None

    # ---------------------------------------------------------------- typed helpers
    @staticmethod
    def pod_path(namespace: str, name: str = "") -> str:
        return f"/api/v1/namespaces/{namespace}/pods" + (f"/{name}" if name else "")

    def get_pod(self, namespace: str, name: str) -> dict | None:
        return self.maybe_get(self.pod_path(namespace, name))

    def create(self, obj: dict) -> dict:
        """Create a namespaced core/v1 or scheduling object from its manifest dict."""
        created = self.call("POST", collection_path(obj), body=obj,
                            where=f"{obj.get('kind')}/{obj['metadata'].get('name')}")
        self._remember(obj)
        return created

    def _remember(self, obj: dict) -> None:
        kind, meta = obj.get("kind"), obj["metadata"]
        if kind != "Namespace":  # namespaces are kept on purpose (shared by runs)
            where = f"{meta['namespace']}/" if meta.get("namespace") else ""
            self._created[object_path(obj)] = f"{kind} {where}{meta['name']}"

    def replace(self, obj: dict) -> dict:
        return self.call("PUT", object_path(obj), body=obj,
                         where=f"{obj.get('kind')}/{obj['metadata'].get('name')}")

    def apply(self, obj: dict) -> dict:
        """Create, or replace an existing object of the same name (ConfigMap, Secret)."""
        try:
            return self.create(obj)
        except Conflict:
            current = self.get(object_path(obj))
            updated = dict(obj)
            updated["metadata"] = {**obj["metadata"],
                                   "resourceVersion": current["metadata"]["resourceVersion"]}
            return self.replace(updated)

    def delete(self, path: str, uid: str | None = None, grace_seconds: int | None = None
               ) -> dict | None:
        """Delete; with `uid` only that very object (a newer one of the same name is kept).
        Returns None when it was already gone."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1",
                                "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            deleted = self.call("DELETE", path, body=body)
        except NotFound:
            self._created.pop(path, None)
            return None
        self._created.pop(path, None)
        return deleted

    def patch(self, path: str, patch: dict) -> dict:
        return self.call("PATCH", path, body=patch)

    def list(self, path: str, **query: Any) -> list[dict]:
        return self.get(path, **query).get("items", [])

    def pod_logs(self, namespace: str, name: str, container: str | None = None) -> str:
        query = {"container": container} if container else None
        try:
            return self.request("GET", f"{self.pod_path(namespace, name)}/log",
                                query=query).text
        except (NotFound, TransportError, InvalidInput) as exc:
            return f"(logs unavailable: {exc.one_line()})"

    def follow_logs(self, namespace: str, name: str, container: str | None = None,
                    timeout_seconds: float = 3600) -> Iterator[str]:
        """The container's log as it is written (`kubectl logs -f`): one line at a time until
        the container ends or `timeout_seconds` pass. Raises like `request` while the
        container has not started (400 "ContainerCreating"), so callers retry."""
        query: dict[str, Any] = {"follow": "true"}
        if container:
            query["container"] = container
        path = f"{self.pod_path(namespace, name)}/log"
        try:
            with self._http.stream("GET", path, params=query,
                                   timeout=httpx.Timeout(timeout_seconds, connect=10.0,
                                                         read=timeout_seconds)) as response:
                if response.status_code >= 400:
                    response.read()
                    self._raise_for(response, path)
                for line in response.iter_lines():
                    yield line
        except httpx.HTTPError as exc:
            raise TransportError(f"log stream ended: {exc}", where=path) from None

    def events_for(self, namespace: str, kind: str, name: str) -> list[dict]:
        return self.list(f"/api/v1/namespaces/{namespace}/events",
                         fieldSelector=f"involvedObject.kind={kind},involvedObject.name={name}")

    def watch(self, path: str, *, field_selector: str | None = None,
              resource_version: str | None = None, timeout_seconds: int = 60
              ) -> Iterator[dict]:
        """Stream watch events ({"type", "object"}) of a collection until the server-side
        timeout; raw JSON lines, so nothing is lost to model conversion. A watch ends no later
        than the credential's renewal point (just after it): callers loop, and their next
        request renews it while the old one is still valid."""
        renew_in = self.credentials.renew_in()
        if renew_in is not None:
            timeout_seconds = max(1, min(timeout_seconds, int(renew_in) + 1))
        query: dict[str, Any] = {"watch": "true", "timeoutSeconds": timeout_seconds,
                                 "allowWatchBookmarks": "false"}
        if field_selector:
            query["fieldSelector"] = field_selector
        if resource_version:
            query["resourceVersion"] = resource_version
        try:
            with self._http.stream("GET", path, params=query,
                                   timeout=httpx.Timeout(timeout_seconds + 15.0,
                                                         connect=10.0)) as response:
                if response.status_code >= 400:
                    response.read()
                    self._raise_for(response, path)
                for line in response.iter_lines():
                    if line.strip():
                        yield json.loads(line)
        except httpx.HTTPError as exc:
            raise TransportError(f"watch failed: {exc}", where=path) from None


def collection_path(obj: dict) -> str:
    kind = obj.get("kind")
    namespace = obj["metadata"].get("namespace", "default")
    if kind == "PriorityClass":
        return "/apis/scheduling.k8s.io/v1/priorityclasses"
    if kind == "PersistentVolume":
        return "/api/v1/persistentvolumes"
    plural = {"Pod": "pods", "ConfigMap": "configmaps", "Secret": "secrets",
              "Namespace": "namespaces", "PersistentVolumeClaim": "persistentvolumeclaims",
              "Service": "services"}
    if kind not in plural:
        raise InvalidInput(f"unsupported kind {kind!r}")
    if kind == "Namespace":
        return "/api/v1/namespaces"
    return f"/api/v1/namespaces/{namespace}/{plural[kind]}"


def object_path(obj: dict) -> str:
    return f"{collection_path(obj)}/{obj['metadata']['name']}"


def wait_until(predicate, timeout: float, interval: float = 0.5, what: str = "condition"):
    """Poll `predicate` (returns a truthy value when done) until `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TransportError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
