"""Capabilities first: before judging, learn what the server can do.

- image / video: a VALID image (video) of each kind is sent first. A 400 for corrupt media means
  something only once a valid one was accepted; a server that refuses every image ("… is not a
  multimodal model") has no image capability, and the checks that need it are DEFERRED quoting
  it, never PASS (the record's false PASS) and never FAIL.
- tools: a `tool_choice: auto` request; vLLM without `--enable-auto-tool-choice
  --tool-call-parser` answers 400 saying so.
- context: `max_model_len` from `/v1/models`; the engine's tokenize endpoint (vLLM `/tokenize`)
  when it has one, so documents are sized by the real tokenizer.

`--require-capability image,video,tools,ctx=32768` turns an absent capability into a FAIL
(`require-*`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from imagekit.acceptance import media
from imagekit.acceptance.models import Exchange
from imagekit.acceptance.protocol import server_words
from imagekit.errors import InvalidInput
from imagekit.results import CheckResult, Status

KNOWN = ("image", "video", "tools", "ctx")
PROBE_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Current time.",
    "parameters": {"type": "object", "properties": {}}}}


class Capability(BaseModel):
    """present: True (accepted), False (refused with a 4xx), None (could not tell)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    present: bool | None
    status_code: int | None = None
    words: str = ""

    def absent_reason(self) -> str:
        if self.present is None:
            return f"{self.name} capability unknown: {self.words}"
        return f"server refused a valid {self.name} request (HTTP {self.status_code}): " \
               f"{self.words!r}"


class Capabilities(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image: Capability
    video: Capability
    tools: Capability
    max_model_len: int | None = None
    tokenize_path: str | None = None
    standin: bool = False


class Requirements(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    image: bool = False
    video: bool = False
    tools: bool = False
    ctx: int | None = None

    @classmethod
    def parse(cls, text: str | None) -> Requirements:
        """`image,video,tools,ctx=32768` (repeatable, comma-separated)."""
        fields: dict[str, Any] = {}
        for item in (text or "").split(","):
            item = item.strip()
            if not item:
                continue
            name, _, value = item.partition("=")
            if name not in KNOWN:
                raise InvalidInput(f"unknown required capability {name!r}; use "
                                   f"{', '.join(KNOWN)}", where="--require-capability")
            if name == "ctx":
                if not value.isdigit() or int(value) < 1:
                    raise InvalidInput("ctx needs a token count, e.g. ctx=32768",
                                       where="--require-capability")
                fields["ctx"] = int(value)
            elif value:
                raise InvalidInput(f"{name} takes no value", where="--require-capability")
            else:
                fields[name] = True
        return cls(**fields)


def _from(name: str, exchange: Exchange) -> Capability:
    if exchange.ok:
        return Capability(name=name, present=True, status_code=200, words="accepted")
    if exchange.status_code is not None and 400 <= exchange.status_code < 500:
        return Capability(name=name, present=False, status_code=exchange.status_code,
                          words=server_words(exchange))
    return Capability(name=name, present=None, status_code=exchange.status_code,
                      words=exchange.summary()[:240])


async def probe(ctx: Any, *, standin: bool = False) -> Capabilities:
    """`ctx` is a SuiteContext; exchanges are recorded like any other."""
    image_part = media.solid("red").content_part()
    image = _from("image", await ctx.ask("capability-image", [{"role": "user", "content": [
        image_part, {"type": "text", "text": "What colour is this image?"}]}], max_tokens=1))
    try:
        video_part = media.colour_video().content_part()
    except media.MediaUnavailable as exc:
        video = Capability(name="video", present=None, words=f"cannot make a test video: {exc}")
    else:
        video = _from("video", await ctx.ask("capability-video", [{"role": "user", "content": [
            video_part, {"type": "text", "text": "What colours does it show?"}]}], max_tokens=1))
    tools = _from("tools", await ctx.ask(
        "capability-tools", [{"role": "user", "content": "What time is it?"}],
        tools=[PROBE_TOOL], tool_choice="auto", max_tokens=1))
    max_len = None
    for model in ctx.models:
        if model.get("id") == ctx.model and isinstance(model.get("max_model_len"), int):
            max_len = model["max_model_len"]
    tokenize_path = None
    counted = await ctx.client.tokenize(ctx.model, [{"role": "user", "content": "hello"}])
    if counted is not None:
        tokenize_path = "/tokenize"
        max_len = max_len or counted.get("max_model_len")
    return Capabilities(image=image, video=video, tools=tools, max_model_len=max_len,
                        tokenize_path=tokenize_path, standin=standin)


def requirement_checks(caps: Capabilities, required: Requirements) -> list[CheckResult]:
    checks = []
    for name in ("image", "video", "tools"):
        if not getattr(required, name):
            continue
        cap: Capability = getattr(caps, name)
        checks.append(CheckResult(
            name=f"require-{name}", status=Status.PASS if cap.present else Status.FAIL,
            detail=(f"required {name}: a valid {name} request was accepted" if cap.present
                    else f"required {name} is absent: {cap.absent_reason()}"),
            data=cap.model_dump()))
    if required.ctx is not None:
        have = caps.max_model_len
        ok = have is not None and have >= required.ctx
        checks.append(CheckResult(
            name="require-ctx", status=Status.PASS if ok else Status.FAIL,
            detail=(f"required context {required.ctx}: server max_model_len {have}" if ok else
                    f"required context {required.ctx} tokens, server max_model_len "
                    f"{have if have is not None else 'not reported'}"),
            data={"required": required.ctx, "max_model_len": have}))
    return checks
