"""Reference OpenAI-compatible server for the acceptance tests. A TEST FIXTURE ONLY: it answers
from the request content with fixed rules and is never evidence about any model.

It can behave like either engine (vLLM answers 400 for corrupt media, SGLang 500; record section
11), and reproduce the record's observations on demand: the disabled mode answering 264, solid
colour images misnamed, the original needle template answering NOT_FOUND. It can also drop
connections mid-stream, answer slowly, emit short outputs or omit usage.

Behaviour is changed at run time with `POST /_ref/behaviour` (JSON fields of `Behaviour`) and
reset with `POST /_ref/reset`. Run standalone: `python tests/acceptance/refserver.py --port 8000
--engine sglang`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import io
import itertools
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from imagekit.acceptance.media import dominant_colour
from imagekit.acceptance.needle import KEY_LABEL, NOT_FOUND, approx_tokens

MODEL = "ref-model"


@dataclasses.dataclass
class Behaviour:
    engine: str = "vllm"
    version: str = "0.0.0-ref"
    corrupt_status: int | None = None          # None: 400 like vLLM, 500 like SGLang
    invalid_params_status: int = 400
    disabled_mode_answer: int = 240            # 264 reproduces the record's disabled mode
    fail_solid_colours: bool = False           # uniform images misnamed (record section 10)
    fail_images: bool = False                  # every image misnamed
    needle_original_not_found: bool = False    # original template answers NOT_FOUND
    tool_ignores_result: bool = False
    no_tool_calls: bool = False
    drop_every: int = 0                        # drop every Nth streamed request mid-stream
    delay_s: float = 0.0
    chunk_delay_s: float = 0.0
    short_output: int = 0                      # emit this many tokens fewer than max_tokens
    omit_usage: bool = False
    down_after_corrupt: bool = False           # answer 503 to everything after corrupt media
    api_key: str | None = None

    @property
    def corrupt_code(self) -> int:
        if self.corrupt_status is not None:
            return self.corrupt_status
        return 500 if self.engine == "sglang" else 400


class RefState:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.streams = itertools.count(1)
        self.down = False
        self.seen_auth: list[str | None] = []


class BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> JSONResponse:
    kind = "BadRequestError" if status < 500 else "InternalServerError"
    return JSONResponse({"object": "error", "message": message, "type": kind, "code": status},
                        status_code=status)


def _data_url(url: str) -> bytes:
    match = re.match(r"data:[^;,]+;base64,(.*)$", url, re.S)
    if not match:
        raise ValueError("only data URLs are supported by the reference server")
    return base64.b64decode(match.group(1))


def _frames(data: bytes) -> list[Image.Image]:
    import av  # noqa: PLC0415

    with av.open(io.BytesIO(data)) as container:
        return [frame.to_image() for frame in container.decode(video=0)]


def _bars(image: Image.Image) -> list[int]:
    """Heights of the blue bars of the test chart, left to right."""
    rgb = image.convert("RGB")
    width, height = rgb.size
    heights, current = [], 0
    for x in range(width):
        column = sum(1 for y in range(height) if rgb.getpixel((x, y)) == (40, 90, 200))
        if column:
            current = max(current, column)
        elif current:
            heights.append(current)
            current = 0
    if current:
        heights.append(current)
    return heights


class Parsed:
    def __init__(self, body: dict, behaviour: Behaviour) -> None:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest(behaviour.invalid_params_status, "messages must be a non-empty list")
        max_tokens = body.get("max_tokens", 256)
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise BadRequest(behaviour.invalid_params_status, "max_tokens must be at least 1")
        temperature = body.get("temperature", 1.0)
        if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise BadRequest(behaviour.invalid_params_status, "temperature must be in [0, 2]")
        self.body, self.messages, self.max_tokens = body, messages, max_tokens
        self.images: list[Image.Image] = []
        self.videos: list[list[Image.Image]] = []
        self.texts: list[str] = []
        self.prompt_tokens = 7
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        content = last_user.get("content")
        parts = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
        for part in parts:
            kind = part.get("type")
            if kind == "text":
                self.texts.append(part.get("text") or "")
            elif kind == "image_url":
                try:
                    image = Image.open(io.BytesIO(_data_url(part["image_url"]["url"])))
                    image.load()
                except Exception as exc:  # noqa: BLE001 - any decode failure is the test case
                    raise BadRequest(behaviour.corrupt_code, f"cannot load image: {exc}") from None
                self.images.append(image.convert("RGB"))
                self.prompt_tokens += 256
            elif kind == "video_url":
                try:
                    frames = _frames(_data_url(part["video_url"]["url"]))
                    if not frames:
                        raise ValueError("no frames")
                except Exception as exc:  # noqa: BLE001
                    raise BadRequest(behaviour.corrupt_code, f"cannot load video: {exc}") from None
                self.videos.append(frames)
                self.prompt_tokens += 1024
        for message in messages:
            text = message.get("content")
            if isinstance(text, str):
                self.prompt_tokens += approx_tokens(text)
            elif isinstance(text, list):
                self.prompt_tokens += sum(approx_tokens(p.get("text") or "") for p in text
                                          if isinstance(p, dict))
        self.text = "\n".join(self.texts)
        self.mode_fields = json.dumps({k: body.get(k) for k in (
            "chat_template_kwargs", "reasoning_effort", "thinking")})


def _answer(p: Parsed, b: Behaviour) -> dict[str, Any]:
    """content / reasoning / tool_calls / ignore_eos for one request."""
    text, body = p.text, p.body
    last = p.messages[-1]
    if body.get("ignore_eos"):
        return {"content": None, "ignore_eos": True}
    if body.get("tools") and last.get("role") == "tool":
        if b.tool_ignores_result:
            return {"content": "I could not look that up."}
        result = json.loads(last.get("content") or "{}")
        return {"content": f"The tracking number is {result.get('tracking_number')}."}
    if body.get("tools") and not b.no_tool_calls:
        order = re.search(r"\b([A-Z]-\d+)\b", text)
        return {"tool_calls": [{"id": "call_ref_1", "type": "function", "function": {
            "name": body["tools"][0]["function"]["name"],
            "arguments": json.dumps({"order_id": order.group(1) if order else ""})}}]}
    if "final integer" in text:
        disabled = '"disabled"' in p.mode_fields or "false" in p.mode_fields
        reasoning = "" if disabled else "20 boxes kept, 20 x 12 = 240."
        return {"content": str(b.disabled_mode_answer if disabled else 240),
                "reasoning": reasoning}
    if "<document>" in text:
        document = text.split("<document>", 1)[1].split("</document>", 1)[0]
        found = re.search(re.escape(KEY_LABEL) + r"\s*(\S+)", document)
        return {"content": found.group(1) if found else NOT_FOUND}
    if "acceptance key" in text:
        found = re.search(re.escape(KEY_LABEL) + r"\s*(\S+)", text)
        if b.needle_original_not_found or not found:
            return {"content": NOT_FOUND}
        return {"content": found.group(1)}
    if "Count from 1 to 10" in text:
        return {"content": " ".join(str(i) for i in range(1, 11))}
    if "codename is" in text:
        return {"content": "OK"}
    if "codename" in text:
        history = " ".join(m["content"] for m in p.messages if isinstance(m.get("content"), str))
        found = re.search(r"codename is ([A-Z0-9-]+)", history)
        return {"content": found.group(1) if found else "I do not know."}
    if "READY" in text:
        return {"content": "READY"}
    if p.videos:
        names = [dominant_colour(f.getpixel((f.width // 2, f.height // 2))) for f in p.videos[0]]
        order = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
        return {"content": ", ".join(order)}
    if p.images and "tallest" in text:
        heights = _bars(p.images[0])
        return {"content": "ABCD"[heights.index(max(heights))] if heights else "unknown"}
    if p.images and b.fail_images:
        return {"content": "Gray."}
    if p.images:
        image = p.images[0]
        if image.getcolors(maxcolors=4) is not None and len(image.getcolors(4)) == 1 \
                and b.fail_solid_colours:
            return {"content": "Gray."}
        centre = image.getpixel((image.width // 2, image.height // 2))
        name = dominant_colour(centre)
        return {"content": name.capitalize() + "."}
    return {"content": "Hello."}


def create_app(state: RefState | None = None) -> Starlette:
    state = state or RefState()

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": MODEL, "object": "model", "owned_by": state.behaviour.engine}]})

    async def version(request: Request) -> Response:
        return JSONResponse({"version": state.behaviour.version})

    async def set_behaviour(request: Request) -> Response:
        state.behaviour = dataclasses.replace(state.behaviour, **await request.json())
        return JSONResponse(dataclasses.asdict(state.behaviour))

    async def reset(request: Request) -> Response:
        state.behaviour, state.down, state.streams = Behaviour(), False, itertools.count(1)
        state.seen_auth.clear()
        return JSONResponse({"reset": True})

    async def seen(request: Request) -> Response:
        return JSONResponse({"auth": state.seen_auth})

    async def chat(request: Request) -> Response:
        b = state.behaviour
        auth = request.headers.get("authorization")
        state.seen_auth.append(auth)
        if b.api_key and auth != f"Bearer {b.api_key}":
            return _error(401, "invalid API key")
        if state.down:
            return _error(503, "engine process is gone")
        if b.delay_s:
            await asyncio.sleep(b.delay_s)
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body is not JSON")
        if isinstance(body, dict) and body.get("model") not in (None, MODEL):
            return _error(404, f"The model `{body.get('model')}` does not exist.")
        try:
            parsed = Parsed(body, b)
        except BadRequest as exc:
            if exc.status == b.corrupt_code and b.down_after_corrupt and "cannot load" in str(exc):
                state.down = True
            return _error(exc.status, str(exc))
        answer = _answer(parsed, b)
        if answer.get("ignore_eos"):
            n = max(0, parsed.max_tokens - b.short_output)
            pieces = ["tok "] * n
            finish = "length"
        else:
            pieces = (answer.get("content") or "").split(" ")
            pieces = [w + (" " if i < len(pieces) - 1 else "") for i, w in enumerate(pieces) if w]
            finish = "tool_calls" if answer.get("tool_calls") else "stop"
        reasoning = answer.get("reasoning") or ""
        completion = len(pieces) + (len(reasoning.split()) if reasoning else 0) + \
            (8 if answer.get("tool_calls") else 0)
        usage = {"prompt_tokens": parsed.prompt_tokens, "completion_tokens": completion,
                 "total_tokens": parsed.prompt_tokens + completion}
        created = int(time.time())
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces) or None}
            if reasoning:
                message["reasoning_content"] = reasoning
            if answer.get("tool_calls"):
                message["tool_calls"] = answer["tool_calls"]
            payload = {"id": "chatcmpl-ref", "object": "chat.completion", "created": created,
                       "model": MODEL, "choices": [{"index": 0, "message": message,
                                                    "finish_reason": finish}]}
            if not b.omit_usage:
                payload["usage"] = usage
            return JSONResponse(payload)
        drop = b.drop_every and next(state.streams) % b.drop_every == 0
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def events() -> AsyncIterator[bytes]:
            def chunk(delta: dict, finish_reason: str | None = None) -> bytes:
                return b"data: " + json.dumps({
                    "id": "chatcmpl-ref", "object": "chat.completion.chunk", "created": created,
                    "model": MODEL, "choices": [{"index": 0, "delta": delta,
                                                 "finish_reason": finish_reason}]}).encode() + \
                    b"\n\n"

            yield chunk({"role": "assistant", "content": ""})
            if reasoning:
                yield chunk({"reasoning_content": reasoning})
            for i, piece in enumerate(pieces):
                if drop and i >= len(pieces) // 2:
                    raise ConnectionAbortedError("reference server drops this connection")
                if b.chunk_delay_s:
                    await asyncio.sleep(b.chunk_delay_s)
                yield chunk({"content": piece})
            if answer.get("tool_calls"):
                calls = [dict(c, index=i) for i, c in enumerate(answer["tool_calls"])]
                yield chunk({"tool_calls": calls})
            yield chunk({}, finish)
            if include_usage and not b.omit_usage:
                yield b"data: " + json.dumps({"id": "chatcmpl-ref", "object":
                                              "chat.completion.chunk", "created": created,
                                              "model": MODEL, "choices": [],
                                              "usage": usage}).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[
        Route("/v1/models", models), Route("/version", version),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/_ref/behaviour", set_behaviour, methods=["POST"]),
        Route("/_ref/reset", reset, methods=["POST"]),
        Route("/_ref/seen", seen),
    ])


def main() -> None:
    import uvicorn  # noqa: PLC0415

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--engine", choices=["vllm", "sglang"], default="vllm")
    args = parser.parse_args()
    state = RefState()
    state.behaviour = Behaviour(engine=args.engine)
    uvicorn.run(create_app(state), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
