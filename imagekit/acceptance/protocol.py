"""Protocol verdicts, apart from semantics.

A functional check asks two questions: did the server speak the OpenAI protocol (status code,
JSON shape, SSE framing with `data: [DONE]`, one `finish_reason`, `usage` when
`stream_options.include_usage` asked for it, tool-call schema), and was the answer right? A model
that does not follow instructions must not fail a protocol check, and a well-formed stream must
not hide a wrong answer. Each functional check records both (`data.protocol`,
`data.semantic`); its status is the worse of the two.

A stand-in model (random weights) is judged on the protocol only: every semantic verdict is
DEFERRED "stand-in model: answers are not judged", never PASS, never a silent FAIL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from imagekit.acceptance.models import Exchange
from imagekit.results import CheckResult, Status

STANDIN_REASON = "stand-in model: answers are not judged"
FINISH_REASONS = ("stop", "length", "tool_calls", "content_filter", "function_call")
_ORDER = [Status.ERROR, Status.FAIL, Status.DEFERRED, Status.PASS]


@dataclass(frozen=True)
class Verdict:
    status: Status
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"status": self.status.value, "detail": self.detail}


def passed(detail: str) -> Verdict:
    return Verdict(Status.PASS, detail)


def failed(detail: str) -> Verdict:
    return Verdict(Status.FAIL, detail)


def deferred(detail: str) -> Verdict:
    return Verdict(Status.DEFERRED, detail)


def worst(*statuses: Status) -> Status:
    for status in _ORDER:
        if status in statuses:
            return status
    return Status.ERROR


def combine(name: str, protocol: Verdict, semantic: Verdict | None,
            data: dict[str, Any] | None = None) -> CheckResult:
    """One check from its protocol and (optional) semantic verdicts."""
    data = dict(data or {})
    data["protocol"] = protocol.as_dict()
    data["semantic"] = semantic.as_dict() if semantic is not None else None
    if semantic is None:
        return CheckResult(name=name, status=protocol.status,
                           detail=f"protocol {protocol.status.value}: {protocol.detail}",
                           data=data)
    status = worst(protocol.status, semantic.status)
    detail = (f"protocol {protocol.status.value}: {protocol.detail}; semantic "
              f"{semantic.status.value}: {semantic.detail}")
    return CheckResult(name=name, status=status, detail=detail, data=data)


def server_words(exchange: Exchange, limit: int = 240) -> str:
    """What the server said about a refused request, in its own words (quoted in details)."""
    body = exchange.response
    message: Any = None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = error.get("message")
        elif isinstance(error, str):
            message = error
        if message is None and "detail" in body:          # FastAPI (transformers serve)
            message = body["detail"]
        if message is None and "message" in body:
            message = body["message"]
    if message is None:
        message = body if body is not None else exchange.error
    text = message if isinstance(message, str) else json.dumps(message, default=str)
    return " ".join(str(text).split())[:limit]


def response_problems(exchange: Exchange, *, want_usage: bool = True) -> list[str]:
    """What is wrong with a 200 answer's shape (non-streamed or streamed)."""
    if exchange.status_code is None:
        return [f"no HTTP answer ({exchange.error})"]
    if exchange.status_code != 200:
        return [f"HTTP {exchange.status_code}: {server_words(exchange, 160)}"]
    if exchange.stream:
        return stream_problems(exchange, want_usage=want_usage)
    problems = []
    body = exchange.response
    if not isinstance(body, dict):
        return ["HTTP 200 body is not a JSON object"]
    if exchange.error:
        problems.append(exchange.error)
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return problems + ["no choices[0]"]
    message = choices[0].get("message")
    if not isinstance(message, dict):
        problems.append("choices[0].message missing")
    else:
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            problems.append(f"message.content is {type(content).__name__}, not a string")
        if content is None and not message.get("tool_calls"):
            problems.append("message has neither content nor tool_calls")
        problems += tool_call_problems(message.get("tool_calls"))
    if choices[0].get("finish_reason") not in FINISH_REASONS:
        problems.append(f"finish_reason {choices[0].get('finish_reason')!r}")
    if want_usage:
        usage = body.get("usage")
        if not isinstance(usage, dict) or not isinstance(usage.get("completion_tokens"), int) \
                or not isinstance(usage.get("prompt_tokens"), int):
            problems.append("usage without integer prompt_tokens/completion_tokens")
    return problems


def tool_call_problems(calls: Any) -> list[str]:
    """The OpenAI tool-call schema: id, type function, function.name, arguments a JSON string."""
    if calls is None:
        return []
    if not isinstance(calls, list):
        return ["tool_calls is not a list"]
    problems = []
    for n, call in enumerate(calls):
        if not isinstance(call, dict):
            problems.append(f"tool_calls[{n}] is not an object")
            continue
        fn = call.get("function") or {}
        if not call.get("id"):
            problems.append(f"tool_calls[{n}] has no id")
        if call.get("type", "function") != "function":
            problems.append(f"tool_calls[{n}].type {call.get('type')!r}")
        if not isinstance(fn.get("name"), str) or not fn.get("name"):
            problems.append(f"tool_calls[{n}].function.name missing")
        args = fn.get("arguments")
        if not isinstance(args, str):
            problems.append(f"tool_calls[{n}].function.arguments is not a JSON string")
        else:
            try:
                json.loads(args or "{}")
            except ValueError:
                problems.append(f"tool_calls[{n}].function.arguments is not valid JSON")
    return problems


def stream_problems(exchange: Exchange, *, want_usage: bool = True) -> list[str]:
    """SSE framing: chunks, one finish_reason, the usage chunk, the closing `data: [DONE]`."""
    problems = []
    if exchange.error and "[DONE]" not in exchange.error:
        problems.append(exchange.error)
    if exchange.chunks < 1:
        problems.append("no SSE data chunks")
    if exchange.finish_reason not in FINISH_REASONS:
        problems.append(f"finish_reason {exchange.finish_reason!r}")
    if want_usage and (not exchange.usage or exchange.usage.completion_tokens is None):
        problems.append("no usage chunk with completion_tokens "
                        "(stream_options.include_usage)")
    if not exchange.done_marker:
        problems.append("stream ended without data: [DONE]")
    return problems


def protocol_verdict(exchanges: list[Exchange], what: str, *,
                     want_usage: bool = True) -> Verdict:
    problems = [f"{e.label}: {p}" for e in exchanges
                for p in response_problems(e, want_usage=want_usage)]
    resets = [e.label for e in exchanges if e.connection_retry]
    note = (f" (the server reset a reused keep-alive connection before answering "
            f"{', '.join(resets)}; answered on a fresh connection)" if resets else "")
    if problems:
        return failed("; ".join(problems)[:500] + note)
    return passed(what + note)
