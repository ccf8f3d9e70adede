"""A load-shape test server (a TEST FIXTURE ONLY, never evidence about a model): an
OpenAI-compatible streaming chat endpoint that remembers what it was sent and when, so tests
can see the order, timing and history of a round's requests from the server's side.

Every answer is `answer-<n>` (n counts the chat requests it received, from 1) followed by
`tok` pieces up to `max_tokens` content chunks, usage included; prompt tokens are the words of
all messages plus 3. `capacity` requests are served at once, each taking `service_s` before its
first chunk (a server that saturates); `fail_first` answers the first N requests with HTTP
500. `POST /_load/behaviour` changes these, `POST /_load/reset` forgets everything, `GET
/_load/seen` lists the requests received: `{"n", "at", "messages", "max_tokens"}` with `at`
in seconds on the server's monotonic clock.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "load-model"


class State:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.capacity = 0
        self.service_s = 0.0
        self.chunk_delay_s = 0.0
        self.fail_first = 0
        self.gate: asyncio.Semaphore | None = None

    def configure(self, **fields: Any) -> None:
        for key, value in fields.items():
            if key not in ("capacity", "service_s", "chunk_delay_s", "fail_first"):
                raise ValueError(f"unknown behaviour {key!r}")
            setattr(self, key, value)
        self.gate = asyncio.Semaphore(self.capacity) if self.capacity else None


def _words(messages: list[dict]) -> int:
    return sum(len(str(m.get("content") or "").split()) for m in messages)


def create_app(state: State) -> Starlette:
    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": MODEL, "object": "model",
                                                         "owned_by": "vllm"}]})

    async def behaviour(request: Request) -> Response:
        state.configure(**await request.json())
        return JSONResponse({"ok": True})

    async def reset(request: Request) -> Response:
        state.reset()
        return JSONResponse({"ok": True})

    async def seen(request: Request) -> Response:
        return JSONResponse(state.seen)

    async def chat(request: Request) -> Response:
        at = time.monotonic()
        body = await request.json()
        messages = body.get("messages") or []
        max_tokens = int(body.get("max_tokens") or 16)
        n = len(state.seen) + 1
        state.seen.append({"n": n, "at": at, "messages": messages, "max_tokens": max_tokens})
        if n <= state.fail_first:
            return JSONResponse({"object": "error", "message": "failing on purpose"},
                                status_code=500)
        pieces = [f"answer-{n}"] + [" tok"] * (max_tokens - 1)
        usage = {"prompt_tokens": _words(messages) + 3, "completion_tokens": max_tokens,
                 "total_tokens": _words(messages) + 3 + max_tokens}

        def chunk(delta: dict, finish: str | None = None, **extra: Any) -> bytes:
            return b"data: " + json.dumps({
                "id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "model": MODEL,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra}).encode() + b"\n\n"

        if not body.get("stream"):
            if state.service_s:
                await asyncio.sleep(state.service_s)
            return JSONResponse({"id": f"chatcmpl-{n}", "object": "chat.completion",
                                 "model": MODEL, "usage": usage, "choices": [{
                                     "index": 0, "finish_reason": "length", "message": {
                                         "role": "assistant", "content": "".join(pieces)}}]})

        async def events() -> AsyncIterator[bytes]:
            gate = state.gate
            if gate is not None:
                await gate.acquire()
            try:
                if state.service_s:
                    await asyncio.sleep(state.service_s)
                yield chunk({"role": "assistant", "content": ""})
                for piece in pieces:
                    if state.chunk_delay_s:
                        await asyncio.sleep(state.chunk_delay_s)
                    yield chunk({"content": piece})
            finally:
                if gate is not None:
                    gate.release()
            yield chunk({}, "length")
            yield b"data: " + json.dumps({"id": f"chatcmpl-{n}", "choices": [],
                                          "usage": usage}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[
        Route("/v1/models", models), Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/_load/behaviour", behaviour, methods=["POST"]),
        Route("/_load/reset", reset, methods=["POST"]), Route("/_load/seen", seen)])


def main() -> None:
    import uvicorn  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(create_app(State()), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
