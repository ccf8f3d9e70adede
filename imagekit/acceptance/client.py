"""Async client for any OpenAI-compatible `/v1/chat/completions` server (vLLM, SGLang, …).

Why our own and not the engines' bench clients: the record (section 4) shows a pinned vLLM CLI
failing "Failed to infer device type" on a CPU-only client box, because its HTTP load-testing
entry point initialises GPU platform defaults. This module speaks plain HTTP with aiohttp and
imports no engine, torch or GPU code.

Why aiohttp and a hand-rolled event-stream reader (docs/design/load-timing.md): measured against
a server of known timing, httpx with httpx-sse spent about 15 ms of client CPU per 64-chunk
request and, at 64 streams in flight, inflated TTFT p50 several-fold; aiohttp with the lean
reader below spends 2-4 ms and keeps the truth. Each chunk's arrival is stamped when its bytes
are read, before any parsing.

Transport errors are named in one vocabulary (ConnectError, ConnectTimeout, ReadTimeout,
ReadError, RemoteProtocolError; the stack's own exception name follows) so that evidence reads
the same whichever HTTP stack read the bytes.

Headers (where the API key travels) are never copied into an `Exchange`; evidence is built from
exchanges only.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from aiohttp.client_proto import ResponseHandler

from imagekit.acceptance.kernel_stamps import (
    StampingEventLoop,
    note_unstamped_read,
    read_stamp,
    stamping_supported,
)
from imagekit.acceptance.models import Exchange, ToolCall, Usage
from imagekit.errors import ImagekitError, InvalidInput

T = TypeVar("T")

CHAT_PATH = "/v1/chat/completions"
_RESET_ERRORS = ("ReadError", "RemoteProtocolError", "WriteError")
#: what reaching the server may raise: the stack's errors and its timeouts
_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)


class ServerUnreachable(ImagekitError):
    """The server did not answer at all (refused, timed out, not HTTP): exit 2, no verdict."""


def public_url(url: str) -> str:
    """The URL without any user:password part (never into messages or evidence)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def normalise_base_url(base_url: str) -> str:
    """Accept `http://h:p`, `http://h:p/` and `http://h:p/v1`; paths are added per call."""
    url = base_url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise InvalidInput("base URL must start with http:// or https://",
                           where=public_url(url))
    if url.endswith("/v1"):
        url = url[:-3]
    return url


@dataclass(slots=True)
class StreamOutcome:
    """What one streamed request produced; cheap to build (load rounds make thousands)."""

    status_code: int | None = None
    error: str | None = None
    body: Any = None
    ttft_s: float | None = None
    e2e_s: float = 0.0
    #: when the request's bytes went to the connection (perf_counter), and how long the request
    #: waited inside this client before that (a connection, other requests being sent)
    sent_at: float | None = None
    send_wait_s: float | None = None
    gaps: list[float] = field(default_factory=list)
    chunks: int = 0
    done_marker: bool = False
    finish_reason: str | None = None
    usage: dict | None = None
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_parts: dict[int, dict[str, str]] = field(default_factory=dict)


class _StampingHandler(ResponseHandler):
    """aiohttp's connection protocol, noting when bytes came in: a chunk is stamped with the
    kernel's receive time where the loop provides it (kernel_stamps), else when the event loop
    read it; never when its stream's task next ran. With hundreds
    of streams in one loop, other streams' work (ending a request, sending the next) sits
    between the two, and a server that answers a batch at once makes that gap milliseconds.

    `unread_since`: the first read since the stream last took bytes; `last_read_at`: the
    latest read (the stamp for bytes left buffered after an earlier take)."""

    unread_since: float | None = None
    last_read_at: float | None = None

    def data_received(self, data: bytes) -> None:
        arrived = read_stamp()
        now = arrived if arrived is not None else time.perf_counter()
        before = self._body_bytes()
        super().data_received(data)
        if self._body_bytes() != before:       # bytes of an answer's body, not framing
            if arrived is None:
                note_unstamped_read()
            if self.unread_since is None:
                self.unread_since = now
            self.last_read_at = now

    def _body_bytes(self) -> int:
        payload = getattr(self, "_payload", None)   # the answer being read (aiohttp 3.x)
        return -1 if payload is None else payload.total_bytes


class EventStreamReader:
    """Server-sent events from raw bytes as they arrive: `feed(bytes)` returns the data of
    every event those bytes completed (multi-line data joined by newlines; comments and the
    `event:`/`id:`/`retry:` fields carry no chunk; LF, CRLF and CR line ends). An event left
    incomplete when the stream ends is dropped, as the SSE specification says."""

    __slots__ = ("_cr", "_data", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._data: list[bytes] = []
        self._cr = False

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._cr and chunk.startswith(b"\n"):      # a CRLF split across two reads
            chunk = chunk[1:]
        self._cr = chunk.endswith(b"\r")
        if b"\r" in chunk:
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = (self._tail + chunk).split(b"\n") if self._tail else chunk.split(b"\n")
        self._tail = lines.pop()
        events = []
        for line in lines:
            if not line:
                if self._data:
                    events.append(self._data[0] if len(self._data) == 1
                                  else b"\n".join(self._data))
                    self._data = []
            elif line.startswith(b"data:"):
                self._data.append(line[6:] if line.startswith(b"data: ") else line[5:])
        return events


def _error_text(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    name = type(exc).__name__
    label = _vocabulary(exc)
    prefix = label if label == name else f"{label} ({name})"
    return f"{prefix}: {text}"[:300]


def _vocabulary(exc: BaseException) -> str:
    """The transport-neutral name of a failure (module docstring)."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "ConnectTimeout"
    if isinstance(exc, TimeoutError):
        return "ReadTimeout"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "ConnectError"
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError,
                        aiohttp.ClientResponseError)):
        return "RemoteProtocolError"
    if isinstance(exc, aiohttp.ClientOSError):
        return "ReadError"
    return type(exc).__name__


async def _stamp_sent(session: aiohttp.ClientSession, context: Any, params: Any) -> None:
    """aiohttp's trace hook, called just before a request body's bytes are written: the
    stream's clock starts here (ChatClient.stream)."""
    outcome = context.trace_request_ctx
    if isinstance(outcome, StreamOutcome) and outcome.sent_at is None:
        outcome.sent_at = time.perf_counter()


_DECODER = json.JSONDecoder()


def _parse_chunk(raw: bytes) -> Any:
    """One event's JSON (None when it is not JSON): `raw_decode` of the text, the cheapest
    exact parse the standard library offers (no encoding sniffing, no trailing-space scan;
    `raw` is already stripped, so anything left over is an error)."""
    try:
        text = raw.decode()
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return None
    return value if end == len(text) else None


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")[:4000]


class ChatClient:
    """One connection pool to one server. Use as `async with ChatClient(url) as client:`.

    `timeout` bounds connecting (at most 10 s) and each wait for more bytes, not a whole
    answer: a long stream that keeps sending is never cut."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float = 600.0,
                 connections: int = 256) -> None:
        self.base_url = normalise_base_url(base_url)
        self.public_url = public_url(self.base_url)
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = timeout
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _limits(self, timeout: float) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=None, sock_connect=min(timeout, 10.0),
                                     sock_read=timeout)

    @property
    def _http(self) -> aiohttp.ClientSession:
        """Made on first use, inside the running event loop (aiohttp's requirement)."""
        if self._session is None:
            sent = aiohttp.TraceConfig()
            sent.on_request_chunk_sent.append(_stamp_sent)
            connector = aiohttp.TCPConnector(limit=self._connections)
            if hasattr(connector, "_factory"):    # aiohttp's protocol factory (3.x)
                connector._factory = functools.partial(  # type: ignore[assignment]
                    _StampingHandler, loop=asyncio.get_running_loop())
            # trust_env off: no proxy from the environment (a proxy would be timed as the
            # server) and no per-request netrc lookup in a thread
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=self._limits(self._timeout), trust_env=False,
                connector=connector, trace_configs=[sent])
        return self._session

    def _url(self, path: str) -> str:
        return self.base_url + path

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def get_json(self, path: str, *, label: str | None = None,
                       timeout: float | None = None) -> Exchange:
        start = time.perf_counter()
        try:
            async with self._http.get(self._url(path), timeout=self._limits(
                    timeout or self._timeout)) as resp:
                raw = await resp.read()
        except _TRANSPORT_ERRORS as exc:
            return Exchange(label=label or path, method="GET", path=path, error=_error_text(exc),
                            latency_s=time.perf_counter() - start)
        return Exchange(label=label or path, method="GET", path=path,
                        status_code=resp.status, response=_decode(raw),
                        latency_s=time.perf_counter() - start)

    async def open_connections(self, count: int) -> None:
        """Open up to `count` pooled connections now (that many `GET /v1/models` at once),
        before a load round starts: a wave of `count` requests on new connections makes the
        one event loop set them up one after another (~0.5 ms each), and the chunks of the
        requests already sent wait unread meanwhile. Failures are the round's to meet."""
        await asyncio.gather(*(self.get_json("/v1/models", timeout=15.0)
                               for _ in range(count)))

    async def require_reachable(self) -> list[dict]:
        """GET /v1/models; an unreachable server is an exit-2 error, not a failed check."""
        exchange = await self.get_json("/v1/models", timeout=15.0)
        if exchange.status_code is None:
            raise ServerUnreachable(f"server unreachable: {exchange.error}",
                                    where=self.public_url)
        if exchange.status_code != 200 or not isinstance(exchange.response, dict):
            raise ServerUnreachable(
                f"GET /v1/models answered HTTP {exchange.status_code}, not an OpenAI-compatible "
                "model list", where=self.public_url)
        data = exchange.response.get("data")
        return [m for m in data if isinstance(m, dict)] if isinstance(data, list) else []

    async def tokenize(self, model: str, messages: list[dict]) -> dict | None:
        """The engine's own tokenizer count (vLLM `POST /tokenize` with the chat template
        applied); None when the server has no such endpoint or refuses the request."""
        try:
            async with self._http.post(self._url("/tokenize"), json={
                    "model": model, "messages": messages, "add_generation_prompt": True},
                    timeout=self._limits(60.0)) as resp:
                status, payload = resp.status, _decode(await resp.read())
        except _TRANSPORT_ERRORS:
            return None
        if status != 200 or not isinstance(payload, dict) or \
                not isinstance(payload.get("count"), int):
            return None
        return {"count": payload["count"], "max_model_len": payload.get("max_model_len")}

    async def chat(self, label: str, body: dict[str, Any]) -> Exchange:
        """POST a chat completion (streamed when `body["stream"]`); never raises on HTTP or
        transport failure: the failure is the recorded outcome.

        One retry, on a fresh connection, when a pooled keep-alive connection was reset before
        any answer (transformers serve 5.17 resets it after each 500 without `Connection:
        close`); the exchange records it (`connection_retry`) so the report can say so."""
        first = await self._chat_once(label, body)
        if first.status_code is None and (first.error or "").startswith(_RESET_ERRORS):
            second = await self._chat_once(label, body)
            return second.model_copy(update={"connection_retry": first.error})
        return first

    async def _chat_once(self, label: str, body: dict[str, Any]) -> Exchange:
        if body.get("stream"):
            outcome = await self.stream(body, keep_text=True)
            return self._exchange_from_stream(label, body, outcome)
        start = time.perf_counter()
        try:
            async with self._http.post(self._url(CHAT_PATH), json=body) as resp:
                status, raw = resp.status, await resp.read()
        except _TRANSPORT_ERRORS as exc:
            return Exchange(label=label, request=body, error=_error_text(exc),
                            latency_s=time.perf_counter() - start)
        latency = time.perf_counter() - start
        payload = _decode(raw)
        fields: dict[str, Any] = {}
        if status == 200:
            if not isinstance(payload, dict) or not payload.get("choices"):
                fields["error"] = "HTTP 200 without choices"
            else:
                choice = payload["choices"][0] or {}
                message = choice.get("message") or {}
                fields.update(
                    content=message.get("content") or "",
                    reasoning=message.get("reasoning_content") or message.get("reasoning") or "",
                    finish_reason=choice.get("finish_reason"),
                    tool_calls=[_tool_call(t) for t in message.get("tool_calls") or []],
                    usage=Usage.parse(payload.get("usage")))
        return Exchange(label=label, request=body, status_code=status,
                        response=payload, latency_s=latency, **fields)

    async def stream(self, body: dict[str, Any], *, keep_text: bool = False) -> StreamOutcome:
        """Stream one request, timing the first event with content (TTFT) and the gaps
        between content events (ITL); E2E stops at the read that completed `data: [DONE]`
        (without one, when the answer ended). Each event is stamped when the event loop read
        the bytes that completed it off the socket, before it is parsed. Reasoning chunks
        count as output: they are tokens the user waits for. An answer that is not an event
        stream (HTTP 200 with another content type) is an error of the exchange.

        The clock starts when the request's bytes are handed to the connection: at 256
        requests in flight, one event loop sends them one after another (aiohttp on Python
        3.11 writes each body on the loop's next turn), and that wait inside the client is not
        the server's; it is kept apart as `send_wait_s`."""
        out = StreamOutcome()
        queued = start = time.perf_counter()
        last = 0.0
        done_at: float | None = None
        try:
            async with self._http.post(self._url(CHAT_PATH), json=body,
                                       trace_request_ctx=out) as resp:
                if out.sent_at is not None:
                    start = out.sent_at
                out.status_code = resp.status
                kind = resp.headers.get("content-type", "")
                if resp.status != 200 or "text/event-stream" not in kind:
                    out.body = _decode(await resp.read())
                    if resp.status == 200:
                        out.error = ("SSEError: Expected response header Content-Type to "
                                     f"contain 'text/event-stream', got {kind!r}")
                    out.e2e_s = time.perf_counter() - start
                    return out
                reader = EventStreamReader()
                protocol = resp.connection.protocol if resp.connection is not None else None
                stamps = protocol if isinstance(protocol, _StampingHandler) else None
                if stamps is not None:      # nothing read before this answer's head counts
                    stamps.unread_since = None
                async for data in resp.content.iter_any():
                    now = time.perf_counter()
                    if stamps is not None:
                        read_at = stamps.unread_since or stamps.last_read_at
                        stamps.unread_since = None
                        if read_at is not None and start <= read_at <= now:
                            now = read_at
                    for raw in reader.feed(data):
                        raw = raw.strip()
                        if raw == b"[DONE]":
                            out.done_marker = True
                            done_at = now
                            continue
                        chunk = _parse_chunk(raw)
                        if chunk is None:
                            out.error = ("undecodable SSE data: "
                                         f"{raw.decode('utf-8', 'replace')[:120]!r}")
                            continue
                        out.chunks += 1
                        if not isinstance(chunk, dict):
                            out.error = f"SSE data is not an object: {str(chunk)[:120]!r}"
                            continue
                        if "error" in chunk and not chunk.get("choices"):
                            out.error = f"error event: {str(chunk['error'])[:200]}"
                            continue
                        if chunk.get("usage"):
                            out.usage = chunk["usage"]
                        for choice in chunk.get("choices") or ():
                            delta = choice.get("delta") or {}
                            text = delta.get("content")
                            thought = delta.get("reasoning_content") or delta.get("reasoning")
                            if text or thought:
                                if out.ttft_s is None:
                                    out.ttft_s = now - start
                                else:
                                    out.gaps.append(now - last)
                                last = now
                                if keep_text:
                                    if text:
                                        out.content.append(text)
                                    if thought:
                                        out.reasoning.append(thought)
                            if keep_text and delta.get("tool_calls"):
                                _merge_tool_parts(out.tool_parts, delta["tool_calls"])
                            if choice.get("finish_reason"):
                                out.finish_reason = choice["finish_reason"]
        except _TRANSPORT_ERRORS as exc:
            out.error = _error_text(exc)
        out.e2e_s = (done_at if done_at is not None else time.perf_counter()) - start
        out.send_wait_s = start - queued
        if out.error is None and out.status_code == 200 and not out.done_marker:
            out.error = "stream ended without data: [DONE]"
        # let the other streams whose bytes came in the same turn of the event loop stamp
        # them before this request's caller records it and sends its next request (a
        # server that answers a batch at once ends many streams in one turn)
        await asyncio.sleep(0)
        return out

    @staticmethod
    def _exchange_from_stream(label: str, body: dict[str, Any], out: StreamOutcome) -> Exchange:
        return Exchange(
            label=label, request=body, status_code=out.status_code, response=out.body,
            error=out.error, latency_s=out.e2e_s, stream=True, ttft_s=out.ttft_s,
            chunks=out.chunks, done_marker=out.done_marker, finish_reason=out.finish_reason,
            content="".join(out.content), reasoning="".join(out.reasoning),
            tool_calls=[ToolCall(id=v["id"], name=v["name"], arguments=v["arguments"])
                        for _, v in sorted(out.tool_parts.items())],
            usage=Usage.parse(out.usage))


def _merge_tool_parts(slots: dict[int, dict[str, str]], parts: list[dict]) -> None:
    """Streamed tool calls arrive in pieces keyed by index: id and name once, arguments in
    fragments."""
    for part in parts:
        slot = slots.setdefault(part.get("index", 0), {"id": "", "name": "", "arguments": ""})
        fn = part.get("function") or {}
        slot["id"] = part.get("id") or slot["id"]
        slot["name"] = fn.get("name") or slot["name"]
        slot["arguments"] += fn.get("arguments") or ""


def _tool_call(raw: Any) -> ToolCall:
    raw = raw if isinstance(raw, dict) else {}
    fn = raw.get("function") or {}
    args = fn.get("arguments")
    return ToolCall(id=str(raw.get("id") or ""), name=str(fn.get("name") or ""),
                    arguments=args if isinstance(args, str) else json.dumps(args))


def run_client(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine of load clients on an event loop whose sockets carry the kernel's receive
    times (kernel_stamps): one loop reads every stream, and on a busy machine it reaches a
    socket milliseconds after the bytes came; the kernel's stamp does not wait for it. Where
    that is not available, uvloop (its reads lag less than asyncio's: against the timing
    reference server at c=64 it halved the TTFT error at p90/p99), else asyncio's loop."""
    if stamping_supported():
        with asyncio.Runner(loop_factory=StampingEventLoop) as runner:
            return runner.run(main)
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)
