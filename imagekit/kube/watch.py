"""Waits are watches, as client-go's `tools/watch.UntilWithSync` does them: list (the state
now and its resourceVersion), watch from that resourceVersion, and on 410 Gone (the version
fell out of the server's window) list again; the deadline is honoured throughout. A watch
stream that breaks off (`WatchBroken`: the connection closed under it) is watched again from
its last resourceVersion, once: a second break in a row, with no event between, is the error.

`observe` yields the watched object's state (None while it does not exist) after every change
and, with `tick`, at least every `tick` seconds (a condition that also depends on time, such as
"stuck for 20 s", is re-judged). `wait_for` returns the first value a condition gives, or
raises `WaitTimeout` at the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol, TypeVar

from imagekit.kube.client import WatchEvent
from imagekit.kube.errors import Gone, TransportError, WaitTimeout, WatchBroken

T = TypeVar("T")


class Watchable(Protocol):
    """What `observe` needs of a `Resource` (tests give a fake)."""

    @property
    def kind(self) -> str: ...

    def list_with_version(self, namespace: str | None = None, *,
                          label_selector: str | None = None,
                          field_selector: str | None = None) -> tuple[list[dict], str]: ...

    def watch(self, namespace: str | None = None, *, field_selector: str | None = None,
              label_selector: str | None = None, resource_version: str | None = None,
              timeout_seconds: int = 60) -> Iterator[WatchEvent]: ...


def _stream(resource: Watchable, namespace: str | None, *, deadline: float,
            tick: float | None, clock: Callable[[], float], what: str, where: str,
            selectors: dict[str, str]) -> Iterator[tuple[str, object]]:
    """The list-then-watch loop both observers share: ("list", items) after every (re-)list,
    ("event", event) for every change, ("tick", None) when a `tick` window ends without one.
    Re-lists on 410 Gone; any other watch ERROR is a `TransportError`; a broken stream is
    watched again from `version` once (`WatchBroken` when it breaks again before an event);
    ends at `deadline`."""
    broken = False   # the last watch broke off: one more from `version`, not a second
    while True:
        items, version = resource.list_with_version(namespace, **selectors)
        yield "list", items
        while True:
            remaining = deadline - clock()
            if remaining <= 0:
                return
            window = remaining if tick is None else min(remaining, tick)
            gone = False
            try:
                for event in resource.watch(namespace, resource_version=version,
                                            timeout_seconds=max(1, min(int(window + 0.999),
                                                                       60)),
                                            **selectors):
                    if event.type == "ERROR":
                        if event.object.get("code") == 410:
                            gone = True
                            break
                        raise TransportError(f"watch of {resource.kind} {what}: "
                                             f"{event.object.get('message') or event.object}",
                                             where=where)
                    meta = event.object.get("metadata") or {}
                    version = meta.get("resourceVersion") or version
                    broken = False
                    if event.type == "BOOKMARK":
                        continue
                    yield "event", event
                    if clock() >= deadline:
                        return
            except Gone:
                gone = True
            except WatchBroken:
                if broken:
                    raise
                broken = True
                continue    # watch again from the last version seen
            broken = False
            if gone:
                break       # list again, watch from the new version
            if tick is not None:
                yield "tick", None   # the window ended without a change: re-judge the time


def observe(resource: Watchable, name: str, namespace: str | None, *, deadline: float,
            tick: float | None = None, clock: Callable[[], float] = time.monotonic
            ) -> Iterator[dict | None]:
    """The object `name` as it changes, until `deadline` (a `clock()` value); then it ends.
    Re-lists on 410 Gone; any other watch ERROR is a `TransportError`."""
    current: dict | None = None
    for what, payload in _stream(resource, namespace, deadline=deadline, tick=tick,
                                 clock=clock, what=name,
                                 where=f"{namespace or ''}/{name}",
                                 selectors={"field_selector": f"metadata.name={name}"}):
        if what == "list":
            items = payload if isinstance(payload, list) else []
            current = items[0] if items else None
        elif isinstance(payload, WatchEvent):
            current = None if payload.type == "DELETED" else payload.object
        yield current


def wait_for(resource: Watchable, name: str, namespace: str | None,
             until: Callable[[dict | None], T | None], *, timeout: float, what: str,
             tick: float | None = None, clock: Callable[[], float] = time.monotonic) -> T:
    """The first non-None `until(object)`; `WaitTimeout` when `timeout` seconds pass first."""
    deadline = clock() + timeout
    last: dict | None = None
    for state in observe(resource, name, namespace, deadline=deadline, tick=tick,
                         clock=clock):
        last = state
        value = until(state)
        if value is not None:
            return value
    raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}",
                      where=f"{namespace + '/' if namespace else ''}{name}", last=last)


def observe_selection(resource: Watchable, namespace: str | None, label_selector: str, *,
                      deadline: float, tick: float | None = None,
                      clock: Callable[[], float] = time.monotonic) -> Iterator[dict[str, dict]]:
    """Like `observe`, for every object a label selector picks: yields {name: object} after
    every change (and every `tick`), until `deadline`. Re-lists on 410 Gone."""
    current: dict[str, dict] = {}
    for what, payload in _stream(resource, namespace, deadline=deadline, tick=tick,
                                 clock=clock, what=label_selector, where=namespace or "",
                                 selectors={"label_selector": label_selector}):
        if what == "list":
            items = payload if isinstance(payload, list) else []
            current = {item["metadata"]["name"]: item for item in items}
        elif isinstance(payload, WatchEvent):
            name = (payload.object.get("metadata") or {}).get("name", "")
            if payload.type == "DELETED":
                current.pop(name, None)
            else:
                current[name] = payload.object
        yield dict(current)


def wait_for_selection(resource: Watchable, namespace: str | None, label_selector: str,
                       until: Callable[[dict[str, dict]], T | None], *, timeout: float,
                       what: str, tick: float | None = None,
                       clock: Callable[[], float] = time.monotonic) -> T:
    """The first non-None `until({name: object})`; `WaitTimeout` when `timeout` passes."""
    deadline = clock() + timeout
    for state in observe_selection(resource, namespace, label_selector, deadline=deadline,
                                   tick=tick, clock=clock):
        value = until(state)
        if value is not None:
            return value
    raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}",
                      where=f"{namespace or ''} {label_selector}")
