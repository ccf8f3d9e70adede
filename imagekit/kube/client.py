"""The Kubernetes API client: httpx against the API server, the kubeconfig read as client-go
reads it (`kubeconfig.py`), credentials kept fresh (`kubeauth.py`), paths from the server's
own discovery (`discovery.py`), API statuses as typed errors (`errors.py`).

Flows ask for resources by kind (`kube.resource("Pod")`, `kube.resource("Job", "batch/v1")`)
and never build an API path: that is this package's job alone (tests/unit/test_kube_layering.py).

Objects travel as plain dicts in the API's own camelCase JSON (what `kubectl get -o json`
shows), not as generated model classes: a manifest rendered from a template goes in as it is,
and fields a client's models do not know (the server is v1.20) are neither dropped nor
invented.

Why httpx and not the kubernetes package's `ApiClient`/`DynamicClient` (measured, see
docs/design/cluster.md "The Kubernetes transport"): importing `kubernetes.dynamic` adds 0.4-0.5 s
to a cluster command's start on this machine (about 2 s under load), and its `DynamicClient`
discovers every group; this transport imports httpx and pydantic only (already loaded by every
command that talks to a server) and asks for one resource list per group-version it uses.
"""

from __future__ import annotations

import builtins
import json
import os
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import stamina
from pydantic import BaseModel, ConfigDict

from imagekit.errors import InfraError, InvalidInput, NotFound, TransportError
from imagekit.kube.discovery import Discovery, ResourceInfo
from imagekit.kube.errors import (
    AdmissionRefused,
    Conflict,
    Gone,
    SentUnanswered,
    WatchBroken,
    for_status,
)

if TYPE_CHECKING:
    from imagekit.kube.incluster import InCluster
    from imagekit.kube.kubeauth import CredentialSource

__all__ = ["AdmissionRefused", "Conflict", "Gone", "Kube", "Resource", "WatchEvent",
           "default_kubeconfig"]


def default_kubeconfig() -> Path:
    """$KUBECONFIG, else ~/.kube/config: the file client-go reads when none is given (without
    one, `Kube` then looks for in-cluster credentials: `incluster.choose`). (The CLI prefers
    the kubeconfig infra recorded; this transport layer does not read infra state.)"""
    env = os.environ.get("KUBECONFIG")
    if env:
        return Path(env.split(os.pathsep)[0])
    return Path.home() / ".kube" / "config"


#: Requests sent once more, on a new connection, when the pooled connection they went out on
#: turns out closed. Go's http.Transport does this for client-go (GET, HEAD); DELETE is safe to
#: repeat too: by uid it removes only that object, and a repeat that finds it gone is "already
#: gone". POST, PUT and PATCH are never repeated blindly: the first one may have landed (a
#: create reads the object back by name first; a replace with its resourceVersion is repeated,
#: its 409 then read back).
REPEATABLE = frozenset({"GET", "HEAD", "DELETE"})
#: How a connection the server (or a load balancer before it) closed while it sat idle in the
#: pool shows on the next request: "Server disconnected without sending a response", or a reset.
CLOSED_UNDER_US = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


#: the RBAC verb of an HTTP method (a GET of a collection is a list, of a watch a watch: the
#: path in the message says which)
VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
         "DELETE": "delete"}


def holds(stored: Any, sent: Any) -> bool:
    """Whether `stored` holds what was `sent`: every field sent has that value there. The
    server's own additions are left aside: a dict's other keys (defaults, status), a list's
    other items (admission's default tolerations), and an empty field it omits."""
    if isinstance(sent, dict):
        if stored is None and not sent:
            return True
        return isinstance(stored, dict) and all(holds(stored.get(key), value)
                                                for key, value in sent.items())
    if isinstance(sent, list):
        if stored is None and not sent:
            return True
        return isinstance(stored, list) and all(any(holds(there, item) for there in stored)
                                                for item in sent)
    return stored == sent or (stored is None and sent in ("", None))


def holds_what_was_sent(current: dict, sent: dict) -> bool:
    """The object the server holds is the one sent: every field but metadata and status
    (`holds`), its labels and annotations too, and it is not being deleted. A create and a
    replace judge their read-back by this, one rule for both."""
    meta, sent_meta = current.get("metadata") or {}, sent.get("metadata") or {}
    return not meta.get("deletionTimestamp") and \
        all(holds(current.get(key), value) for key, value in sent.items()
            if key not in ("metadata", "status")) and \
        all(holds(meta.get(key), sent_meta[key]) for key in ("labels", "annotations")
            if key in sent_meta)


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
        return body.get("message") or response.reason_phrase
    except (ValueError, AttributeError):
        return response.text[:300] or response.reason_phrase


class WatchEvent(BaseModel):
    """One line of a watch stream: ADDED, MODIFIED, DELETED, BOOKMARK or ERROR (then `object`
    is a Status, e.g. code 410 when the resourceVersion is too old)."""

    model_config = ConfigDict(frozen=True)

    type: str
    object: dict[str, Any]

    @property
    def resource_version(self) -> str | None:
        return (self.object.get("metadata") or {}).get("resourceVersion")


class Resource:
    """One kind of one group-version on this server (the Python client's
    `DynamicClient.resources.get(api_version=, kind=)`): get, list, delete, patch, watch by
    name and namespace; the path comes from discovery."""

    def __init__(self, kube: Kube, info: ResourceInfo) -> None:
        self.kube, self.info = kube, info

    @property
    def kind(self) -> str:
        return self.info.kind

    def path(self, name: str | None = None, namespace: str | None = None,
             subresource: str | None = None) -> str:
        if self.info.namespaced and name is not None and not namespace:
            raise InvalidInput(f"{self.kind} {name}: a namespaced kind needs a namespace")
        return self.info.path(name, namespace, subresource)

    def get(self, name: str, namespace: str | None = None) -> dict:
        return self.kube.call("GET", self.path(name, namespace))

    def maybe_get(self, name: str, namespace: str | None = None) -> dict | None:
        try:
            return self.get(name, namespace)
        except NotFound:
            return None

    def exists(self, name: str, namespace: str | None = None) -> bool:
        return self.maybe_get(name, namespace) is not None

    def list_with_version(self, namespace: str | None = None, *,
                          label_selector: str | None = None,
                          field_selector: str | None = None) -> tuple[list[dict], str]:
        """(items, the list's resourceVersion: where a watch of the same selection starts)."""
        query = {k: v for k, v in (("labelSelector", label_selector),
                                   ("fieldSelector", field_selector)) if v}
        body = self.kube.call("GET", self.path(None, namespace), query=query or None)
        return body.get("items") or [], (body.get("metadata") or {}).get("resourceVersion", "")

    def list(self, namespace: str | None = None, *, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict]:
        return self.list_with_version(namespace, label_selector=label_selector,
                                      field_selector=field_selector)[0]

    def create(self, obj: dict) -> dict:
        return self.kube.create(obj)

    def delete(self, name: str, namespace: str | None = None, *, uid: str | None = None,
               grace_seconds: int | None = None) -> dict | None:
        """Delete; with `uid` only that very object (a newer one of the same name is kept).
        Returns None when it was already gone."""
        return self.kube.delete(self.path(name, namespace), uid=uid,
                                grace_seconds=grace_seconds)

    def patch(self, name: str, patch: dict, namespace: str | None = None) -> dict:
        """A JSON merge patch."""
        return self.kube.patch(self.path(name, namespace), patch)

    def watch(self, namespace: str | None = None, *, field_selector: str | None = None,
              label_selector: str | None = None, resource_version: str | None = None,
              timeout_seconds: int = 60) -> Iterator[WatchEvent]:
        """The collection's events from `resource_version` until the server-side timeout (or
        the credential's renewal point, just after it: callers loop, see `watch.observe`).
        A 410 at the start raises `Gone`; one inside the stream is an ERROR event."""
        return self.kube.watch_path(self.path(None, namespace), field_selector=field_selector,
                                    label_selector=label_selector,
                                    resource_version=resource_version,
                                    timeout_seconds=timeout_seconds)


class Kube:
    """A connection to one cluster: a kubeconfig file, or in-cluster (a Pod's ServiceAccount).

    Without `kubeconfig` it is found as client-go finds it (`incluster.choose`): $KUBECONFIG,
    else ~/.kube/config, else in-cluster (KUBERNETES_SERVICE_HOST/PORT and the token mounted
    at `serviceaccount_dir`, default /var/run/secrets/kubernetes.io/serviceaccount).

    The kubeconfig is read as client-go reads it (`kubeconfig.py`: current context, CA,
    client certificates, inline *-data fields); the user's credential is live
    (`kubeauth.py`): an exec plugin is re-run before its token expires and after a 401, a
    tokenFile (and the in-cluster token, which the kubelet rotates) is re-read when it
    changes. Requests go through httpx with that credential on each one, watches and log
    streams included.

    `default_namespace` is the kubeconfig context's namespace, or in-cluster the Pod's own
    (the `namespace` file); "default" when neither names one. Commands keep their own
    `--namespace` default: this is what the connection says, for callers that ask.

    The objects this connection created and has not deleted are remembered (`left()`): when
    the run ends on a credential that cannot be renewed, the error says what stayed behind."""

    def __init__(self, kubeconfig: Path | str | InCluster | None = None, *,
                 context: str | None = None, discovery: Discovery | None = None,
                 serviceaccount_dir: Path | None = None) -> None:
        from imagekit.kube import kubeconfig as kubeconfig_file
        from imagekit.kube.incluster import InCluster, choose
        from imagekit.kube.kubeauth import TokenFileSource, source_for

        source = kubeconfig if isinstance(kubeconfig, InCluster) else choose(
            Path(kubeconfig) if kubeconfig else None, serviceaccount_dir=serviceaccount_dir)
        self.source: Path | InCluster = source
        self.context = context
        self.in_cluster: InCluster | None = None
        if isinstance(source, InCluster):
            #: where the credential came from (evidence names it): here the mounted folder
            self.kubeconfig = source.folder
            self.in_cluster = source
            self.user = source.user()
            ssl_context = source.ssl_context()
            self.credentials: CredentialSource = TokenFileSource(
                self.user, str(source.token), source.token, who="in-cluster ServiceAccount",
                what="the token file")
            self.host = source.server
            self.default_namespace = source.namespace()
            self._sni: str | None = None
        else:
            if not source.is_file():
                raise InfraError("no kubeconfig; run `imagekit infra up --cluster` or pass "
                                 "--kubeconfig", where=str(source))
            self.kubeconfig = source
            target = kubeconfig_file.load(source, context)
            self.user = target.user_name
            ssl_context = kubeconfig_file.ssl_context(target)
            self.credentials = source_for(target, ssl_context)
            self.host = target.cluster.server.rstrip("/")
            self.default_namespace = target.namespace or "default"
            self._sni = target.cluster.tls_server_name
        self.credentials.current()  # a plugin that cannot run fails here, before any change
        self._created: dict[str, str] = {}
        self.discovery = discovery or Discovery(lambda p: self.call("GET", p))
        self._ssl_context = ssl_context
        self._http = self._new_client()

    def _new_client(self) -> httpx.Client:
        """An httpx client on this connection's server, trust and live credential. Besides the
        pooled one, a request that met a closed pooled connection is repeated on a client of
        its own: a new connection for sure, not another pooled one the server closed too."""
        from imagekit.kube.kubeauth import KubeAuth

        hooks: dict[str, list[Callable[..., Any]]] = {}
        if self._sni:  # the name the server's certificate is checked for
            sni = self._sni
            hooks["request"] = [lambda request: request.extensions.setdefault("sni_hostname",
                                                                              sni)]
        return httpx.Client(base_url=self.host, verify=self._ssl_context,
                            auth=KubeAuth(self.credentials),
                            headers={"Accept": "application/json"}, event_hooks=hooks,
                            timeout=httpx.Timeout(30.0, connect=10.0), trust_env=False)

    def another(self) -> Kube:
        """A second connection to the same cluster (a log follower's own thread), sharing this
        one's discovery."""
        return Kube(self.source, context=self.context, discovery=self.discovery)

    def left(self) -> list[str]:
        """`Kind namespace/name` of what this connection created and did not delete."""
        return list(self._created.values())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Kube:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        from imagekit.kube.kubeauth import KubeCredentialError

        if isinstance(exc, KubeCredentialError) and self._created and \
                "left behind:" not in exc.message:
            exc.message += "; left behind (created by this run, not deleted): " + \
                ", ".join(self.left())
        self.close()

    # ---------------------------------------------------------------- resources
    def resource(self, kind: str, api_version: str = "v1") -> Resource:
        """The resource of `kind` in `api_version`, as the server's discovery names it."""
        return Resource(self, self.discovery.resolve(kind, api_version))

    def resource_of(self, obj: dict) -> Resource:
        return self.resource(obj.get("kind", ""), obj.get("apiVersion", "v1"))

    def version(self) -> dict:
        """The server's /version (gitVersion, platform)."""
        return self.call("GET", "/version")

    # ---------------------------------------------------------------- raw calls
    def _raise_for(self, response: httpx.Response, where: str, method: str = "GET") -> None:
        message = _message(response) if response.status_code >= 400 else ""
        if response.status_code == 403:
            # a refusal no access review foresaw (an admission webhook, a policy): the request
            # is named with the server's words, so the line says what was refused
            message = f"{VERBS.get(method, method.lower())} refused by the API server: {message}"
        error = for_status(response.status_code, message, where)
        if error is not None:
            raise error

    def request(self, method: str, path: str, *, body: Any = None,
                query: dict | None = None, where: str | None = None,
                timeout: float | None = None, resent: dict | None = None,
                new_connection: bool = False) -> httpx.Response:
        """One request. `resent` (a guarded replace's): a write met by a closed connection is
        sent once more as well, and `resent["again"]` says so (the caller reads a 409 then).
        Without it, a write met by a closed connection raises SentUnanswered.
        `new_connection`: sent on a connection of its own, never a pooled one (a create sent
        again after one closed under it)."""
        content_type = "application/merge-patch+json" if method == "PATCH" else \
            "application/json"

        def send(client: httpx.Client) -> httpx.Response:
            return client.request(
                method, path, params=query or None,
                content=json.dumps(body).encode() if body is not None else None,
                headers={"Content-Type": content_type} if body is not None else None,
                timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)

        try:
            if new_connection:
                with self._new_client() as client:
                    response = send(client)
            elif method == "GET":  # reads are safe to repeat over a dropped connection
                for attempt in stamina.retry_context(on=httpx.TransportError, attempts=3,
                                                     wait_initial=0.2, wait_max=2.0):
                    with attempt:
                        response = self._send_once_more(method, send)
            else:  # DELETE once more on a new connection; a write only when the caller can
                # tell a repeat that landed twice (a replace with its resourceVersion: 409,
                # then read back)
                response = self._send_once_more(method, send, resent)
        except CLOSED_UNDER_US as exc:
            # a write sent on a connection that closed before its answer: it may have landed
            error = SentUnanswered if method not in REPEATABLE else TransportError
            raise error(f"cannot reach the API server: {exc}", where=self.host) from None
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach the API server: {exc}", where=self.host) \
                from None
        self._raise_for(response, where or path, method)
        return response

    def _send_once_more(self, method: str, send: Callable[[httpx.Client], httpx.Response],
                        resent: dict | None = None) -> httpx.Response:
        """`send` on the pooled connection; when that connection turns out closed under it
        (and `method` is REPEATABLE, or the caller passed `resent`), once more on a new
        connection."""
        try:
            return send(self._http)
        except CLOSED_UNDER_US:
            if method not in REPEATABLE and resent is None:
                raise
            if resent is not None:
                resent["again"] = True
        with self._new_client() as client:
            return send(client)

    def _open_stream(self, path: str, query: dict[str, Any], timeout: httpx.Timeout
                     ) -> tuple[ExitStack, httpx.Response]:
        """A streamed GET (watch, followed log) up to its headers, with what closes it.

        A stream has a connection of its own, closed with it, never one of the pool: a load
        balancer may close a connection once a long answer ends without saying so, and a write
        sent on it then is lost unanswered (a write is never repeated). Opened on a connection
        that turns out closed, it is opened once more on a new one."""
        for attempt in (1, 2):
            stack = ExitStack()
            try:
                client = stack.enter_context(self._new_client())
                return stack, stack.enter_context(
                    client.stream("GET", path, params=query, timeout=timeout))
            except CLOSED_UNDER_US:
                stack.close()
                if attempt == 2:
                    raise
            except BaseException:
                stack.close()
                raise
        raise AssertionError("unreachable")

    def call(self, method: str, path: str, body: Any = None, query: dict | None = None,
             where: str | None = None) -> dict:
        """One API request by path (this package, and tests); returns the JSON body as a
        dict, or raises a typed error. Flows use `resource()`."""
        response = self.request(method, path, body=body, query=query, where=where)
        return response.json() if response.content else {}

    def get(self, path: str, **query: Any) -> dict:
        return self.call("GET", path, query=query or None)

    def maybe_get(self, path: str) -> dict | None:
        try:
            return self.get(path)
        except NotFound:
            return None

    def list(self, path: str, **query: Any) -> list[dict]:
        return self.get(path, **query).get("items", [])

    def patch(self, path: str, patch: dict) -> dict:
        return self.call("PATCH", path, body=patch)

    def delete(self, path: str, uid: str | None = None, grace_seconds: int | None = None
               ) -> dict | None:
        """Delete by path; with `uid` only that very object. None when it was already gone."""
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

    # ---------------------------------------------------------------- objects
    def object_path(self, obj: dict) -> str:
        meta = obj["metadata"]
        resource = self.resource_of(obj)
        namespace = meta.get("namespace", "default") if resource.info.namespaced else None
        return resource.path(meta["name"], namespace)

    def collection_path(self, obj: dict) -> str:
        resource = self.resource_of(obj)
        namespace = obj["metadata"].get("namespace", "default") \
            if resource.info.namespaced else None
        return resource.path(None, namespace)

    def create(self, obj: dict, *, dry_run: bool = False) -> dict:
        """Create an object from its manifest dict (any kind the server discovers); with
        `dry_run` the server only says what it would have stored (`dryRun=All`).

        A create is never sent twice blindly. A dry run stores nothing, so one whose
        connection closed is simply sent again. Otherwise, a connection closed after the create
        went out leaves its outcome unknown: the object is read by name first; absent, it is
        created once more; present, it is judged like a 409. A 409: the object of that name is
        returned when it holds what was sent (`holds_what_was_sent`: this create landed, or an
        identical one); else Conflict, naming the difference's owner as unknown (someone else's
        object, or one being deleted)."""
        where = f"{obj.get('kind')}/{obj['metadata'].get('name')}"

        def post(new_connection: bool = False) -> dict:
            response = self.request("POST", self.collection_path(obj), body=obj,
                                    query={"dryRun": "All"} if dry_run else None, where=where,
                                    new_connection=new_connection)
            return response.json() if response.content else {}

        try:
            created = post()
        except SentUnanswered:
            if dry_run:          # stores nothing: safe to send again, nothing to read back
                return post(new_connection=True)
            stored = self.maybe_get(self.object_path(obj))
            if stored is not None:
                created = self._created_as_sent(stored, obj, where)
            else:
                try:
                    created = post(new_connection=True)
                except Conflict:   # made in between: judged like any 409
                    created = self._created_as_sent(self.get(self.object_path(obj)), obj,
                                                    where)
        except Conflict:
            if dry_run:
                raise
            created = self._created_as_sent(self.get(self.object_path(obj)), obj, where)
        if not dry_run:
            self._remember(obj)
        return created

    @staticmethod
    def _created_as_sent(stored: dict, obj: dict, where: str) -> dict:
        """`stored` when it holds what was sent; Conflict otherwise."""
        if holds_what_was_sent(stored, obj):
            return stored
        state = "is being deleted" if (stored.get("metadata") or {}).get(
            "deletionTimestamp") else "differs from what was sent"
        raise Conflict(f"{where} exists and {state} (an object of that name made by someone "
                       "else, or an earlier run)", where=where)

    def _remember(self, obj: dict) -> None:
        kind, meta = obj.get("kind"), obj["metadata"]
        if kind != "Namespace":  # namespaces are kept on purpose (shared by runs)
            where = f"{meta['namespace']}/" if meta.get("namespace") else ""
            self._created[self.object_path(obj)] = f"{kind} {where}{meta['name']}"

    def replace(self, obj: dict) -> dict:
        """PUT the object. With its `metadata.resourceVersion` a replace is safe to repeat over
        a connection closed under it: a repeat after the first landed is a 409 (the version
        moved on), and the object read back then must hold what was sent."""
        resent: dict = {}
        where = f"{obj.get('kind')}/{obj['metadata'].get('name')}"
        guarded = bool(obj["metadata"].get("resourceVersion"))
        try:
            response = self.request("PUT", self.object_path(obj), body=obj, where=where,
                                    resent=resent if guarded else None)
            return response.json() if response.content else {}
        except Conflict:
            if not resent.get("again"):
                raise
            current = self.get(self.object_path(obj))
            if not holds_what_was_sent(current, obj):
                raise
            return current

    def apply(self, obj: dict) -> dict:
        """Create, or replace an existing object of the same name (ConfigMap, Secret)."""
        try:
            return self.create(obj)
        except Conflict:
            current = self.get(self.object_path(obj))
            updated = dict(obj)
            updated["metadata"] = {**obj["metadata"],
                                   "resourceVersion": current["metadata"]["resourceVersion"]}
            return self.replace(updated)

    def delete_object(self, obj: dict, *, grace_seconds: int | None = None) -> dict | None:
        """Delete the object a manifest (or a read) names; that uid only when it has one."""
        uid = (obj.get("metadata") or {}).get("uid")
        return self.delete(self.object_path(obj), uid=uid, grace_seconds=grace_seconds)

    # ---------------------------------------------------------------- pods
    def pod_path(self, namespace: str, name: str | None = None) -> str:
        return self.resource("Pod").path(name or None, namespace)

    def get_pod(self, namespace: str, name: str) -> dict | None:
        return self.resource("Pod").maybe_get(name, namespace)

    def pod_logs(self, namespace: str, name: str, container: str | None = None) -> str:
        query = {"container": container} if container else None
        try:
            return self.request("GET", self.resource("Pod").path(name, namespace, "log"),
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
        path = self.resource("Pod").path(name, namespace, "log")
        try:
            stack, response = self._open_stream(path, query, httpx.Timeout(
                timeout_seconds, connect=10.0, read=timeout_seconds))
            with stack:
                if response.status_code >= 400:
                    response.read()
                    self._raise_for(response, path)
                yield from response.iter_lines()
        except httpx.HTTPError as exc:
            raise TransportError(f"log stream ended: {exc}", where=path) from None

    def events_for(self, namespace: str, kind: str, name: str) -> builtins.list[dict]:
        return self.resource("Event").list(
            namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}")

    # ---------------------------------------------------------------- watch
    def watch_path(self, path: str, *, field_selector: str | None = None,
                   label_selector: str | None = None, resource_version: str | None = None,
                   timeout_seconds: int = 60) -> Iterator[WatchEvent]:
        """Stream watch events of a collection until the server-side timeout. A watch ends
        no later than the credential's renewal point (just after it): callers loop, and their
        next request renews it while the old one is still valid."""
        renew_in = self.credentials.renew_in()
        if renew_in is not None:
            timeout_seconds = max(1, min(timeout_seconds, int(renew_in) + 1))
        query: dict[str, Any] = {"watch": "true", "timeoutSeconds": timeout_seconds,
                                 "allowWatchBookmarks": "false"}
        if field_selector:
            query["fieldSelector"] = field_selector
        if label_selector:
            query["labelSelector"] = label_selector
        if resource_version:
            query["resourceVersion"] = resource_version
        opened = False
        try:
            stack, response = self._open_stream(path, query, httpx.Timeout(
                timeout_seconds + 15.0, connect=10.0))
            with stack:
                if response.status_code >= 400:
                    response.read()
                    self._raise_for(response, path)
                opened = True
                for line in response.iter_lines():
                    if line.strip():
                        yield WatchEvent.model_validate(json.loads(line))
        except httpx.HTTPError as exc:
            if opened:
                raise WatchBroken(f"watch broke off: {exc}", where=path) from None
            raise TransportError(f"watch failed: {exc}", where=path) from None

