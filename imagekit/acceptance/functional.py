"""The 12 functional checks of the record (section 8): three inference modes, tool calling with
result backfill, streaming, multi-turn, image understanding (solid colours, a bordered colour, a
chart), video understanding, invalid parameters, and recovery; then the mode comparison.

The text cases (arithmetic, multi-turn, streaming) come from the run's cases file
(imagekit.acceptance.cases): the record's by default, or a set calibrated on the model served.

Judging rules worth stating:
- Identical repeats of the arithmetic problem are reproductions of one problem, never an accuracy
  estimate; each mode lists correctness, output tokens and latency together (a shorter wrong
  answer does not make a mode better: `mode-comparison`).
- A capability the server does not have (tools, images, video) is "not served by this model",
  DEFERRED, never FAIL; `--require-capability` turns its absence into a FAIL of its own.
- Solid-colour images are judged on their own: a passing bordered image does not override a
  failing solid one (record, section 10).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable

from imagekit.acceptance import media
from imagekit.acceptance.models import Exchange, Sample
from imagekit.acceptance.protocol import (
    Verdict,
    combine,
    deferred,
    failed,
    passed,
    protocol_verdict,
    response_problems,
    server_words,
)
from imagekit.acceptance.suite import SuiteContext, user
from imagekit.results import CheckResult, Status

NOT_SERVED = "not served by this model"

TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up the shipping status and tracking number of an order.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "Order id, e.g. A-1"}},
            "required": ["order_id"],
        },
    },
}
TOOL_ORDER = "A-7731"
TOOL_RESULT = {"order_id": TOOL_ORDER, "status": "shipped", "tracking_number": "ZX-48213-QT"}

COLOUR_WORDS = ("red", "green", "blue", "yellow", "black", "white", "gray", "grey", "orange",
                "purple", "pink", "brown")


def _tokens(exchange: Exchange) -> int | None:
    return exchange.usage.completion_tokens if exchange.usage else None


def _sample(case: str, expected: str, exchange: Exchange, correct: bool, note: str = "") -> Sample:
    if exchange.ok and exchange.finish_reason == "length":
        note = (note + "; " if note else "") + "stopped at max_tokens (finish_reason length)"
    return Sample(case=case, expected=expected, answer=exchange.answer.strip()[:200],
                  correct=correct and exchange.ok, status_code=exchange.status_code,
                  output_tokens=_tokens(exchange), latency_s=round(exchange.latency_s, 4),
                  note=note or ("" if exchange.ok else exchange.summary()))


def _verdict(name: str, samples: list[Sample], what: str) -> CheckResult:
    good = sum(s.correct for s in samples)
    status = Status.PASS if samples and good == len(samples) else Status.FAIL
    wrong = [f"{s.case}: {s.answer!r}" + (f" ({s.note})" if s.note else "")
             for s in samples if not s.correct]
    detail = f"{good}/{len(samples)} {what}"
    if wrong:
        detail += "; wrong: " + "; ".join(wrong)[:400]
    else:
        detail += "; answered " + ", ".join(sorted({repr(s.answer[:160]) for s in samples}))
    return CheckResult(name=name, status=status, detail=detail,
                       data={"samples": [s.model_dump() for s in samples]})


def _semantic(ctx: SuiteContext, name: str, samples: list[Sample], what: str) -> Verdict:
    def judge() -> Verdict:
        result = _verdict(name, samples, what)
        return Verdict(result.status, result.detail)
    return ctx.semantic(judge)


def _explained(ctx: SuiteContext, check: CheckResult) -> CheckResult:
    """Append what the engine profile observed (an explanation; the status stays)."""
    note = ctx.observed(check.name)
    if not note or check.status is Status.PASS:
        return check
    return check.model_copy(update={"detail": f"{check.detail} ({note})"})


def _absent(ctx: SuiteContext, name: str, capability: str) -> CheckResult | None:
    """DEFERRED quoting the server when the capability this check needs is absent."""
    caps = ctx.capabilities
    if caps is None:
        return None
    cap = getattr(caps, capability)
    if cap.present:
        return None
    check = CheckResult(name=name, status=Status.DEFERRED,
                        detail=f"{NOT_SERVED}: needs {capability}: {cap.absent_reason()}",
                        data={"capability": cap.model_dump(), "protocol": None,
                              "semantic": None, "not_served": capability})
    return _explained(ctx, check)


async def check_mode(ctx: SuiteContext, mode: str) -> CheckResult:
    fields = ctx.profile.modes.get(mode)
    if fields is None:
        return CheckResult(name=f"mode-{mode}", status=Status.DEFERRED,
                           detail=f"no request fields for mode {mode!r} in the {ctx.engine} "
                                  "profile; set them with --engine-config")
    case = ctx.options.cases.arithmetic
    samples, exchanges = [], []
    for i in range(ctx.options.repeats):
        exchange = await ctx.ask(f"mode-{mode}-rep{i + 1}", [user(case.prompt)], **fields)
        exchanges.append(exchange)
        correct, why = case.judge(exchange.answer)
        only_integer = bool(re.fullmatch(r"\s*-?\d[\d,]*\s*\.?\s*", exchange.answer))
        note = why if case.match != "integer" or only_integer or not exchange.ok else \
            f"{why}; not only an integer"
        samples.append(_sample(f"rep{i + 1}", case.expected, exchange, correct, note))
    answers = sorted({s.answer for s in samples})
    tokens = [s.output_tokens for s in samples]
    latency = [s.latency_s for s in samples]
    protocol = protocol_verdict(exchanges, f"{len(exchanges)} answers HTTP 200, well-formed")
    semantic = _semantic(ctx, f"mode-{mode}", samples,
                         f"reproductions answered {case.expected} ({case.match} match)")
    result = combine(f"mode-{mode}", protocol, semantic,
                     {"samples": [s.model_dump() for s in samples], "mode_fields": fields,
                      "reproductions": len(samples), "mode": mode})
    detail = (f"{result.detail}; answers {answers}; output tokens {tokens}; latency "
              f"{min(latency):.2f}-{max(latency):.2f}s; {len(samples)} reproductions of one "
              "problem, not independent samples")
    return result.model_copy(update={"detail": detail})


async def check_tools(ctx: SuiteContext) -> CheckResult:
    absent = _absent(ctx, "tool-calling", "tools")
    if absent is not None:
        return absent
    messages: list[dict] = [user(
        f"What is the tracking number of order {TOOL_ORDER}? Use the lookup_order tool, then "
        "answer with the tracking number.")]
    first = await ctx.ask("tools-call", messages, tools=[TOOL], tool_choice="auto")
    calls = [c for c in first.tool_calls if c.name == "lookup_order"]
    call = calls[0] if calls else None
    args: dict = {}
    if call is not None:
        try:
            args = json.loads(call.arguments or "{}")
        except ValueError:
            args = {}
    # The backfill round trip is protocol: sent with the model's call, or (when the model made
    # none, e.g. a stand-in) a well-formed call of our own, so the server's schema is exercised.
    synthetic = call is None
    call_id = (call.id if call is not None and call.id else "call_0")
    arguments = call.arguments if call is not None else json.dumps({"order_id": TOOL_ORDER})
    messages.append({"role": "assistant", "content": first.content or None,
                     "tool_calls": [{"id": call_id, "type": "function",
                                     "function": {"name": "lookup_order",
                                                  "arguments": arguments}}]})
    messages.append({"role": "tool", "tool_call_id": call_id,
                     "content": json.dumps(TOOL_RESULT)})
    final = await ctx.ask("tools-backfill", messages, tools=[TOOL])
    protocol = protocol_verdict(
        [first, final], "tool request and backfill (tool result message) answered 200, "
        "tool_calls schema well-formed" + (" (backfill with a call of ours: the model made "
                                          "none)" if synthetic else ""))

    def judge() -> Verdict:
        if call is None:
            return failed(f"no lookup_order tool call returned (finish_reason "
                          f"{first.finish_reason}, content {first.answer[:80]!r})")
        if str(args.get("order_id", "")).strip() != TOOL_ORDER:
            return failed(f"tool called with {args!r}, expected order_id {TOOL_ORDER}")
        if TOOL_RESULT["tracking_number"] not in final.answer:
            return failed(f"final answer does not use the tool result: {final.summary()}")
        return passed("right tool and argument; the final answer uses the tool result")

    return _explained(ctx, combine(
        "tool-calling", protocol, ctx.semantic(judge),
        {"arguments": args, "final_answer": final.answer[:300], "synthetic_call": synthetic,
         "output_tokens": _tokens(final), "latency_s": final.latency_s}))


async def check_streaming(ctx: SuiteContext) -> CheckResult:
    case = ctx.options.cases.streaming
    exchange = await ctx.ask("streaming", [user(case.prompt)], stream=True,
                             stream_options={"include_usage": True})
    plain = await ctx.ask("streaming-plain", [user(case.prompt)]) \
        if case.compare_non_streaming else None
    problems = response_problems(exchange)
    protocol = failed("; ".join(problems)) if problems else passed(
        f"{exchange.chunks} SSE chunks, finish_reason {exchange.finish_reason}, usage "
        f"{exchange.usage.completion_tokens if exchange.usage else None} tokens "
        f"(include_usage), data: [DONE], TTFT {exchange.ttft_s or 0:.3f}s")

    def judge() -> Verdict:
        answer = exchange.answer.strip()
        correct, why = case.judge(answer)
        if not correct:
            return failed(f"streamed {answer[:80]!r}, expected {case.expected!r}: {why}")
        if plain is not None and plain.ok and plain.answer.strip() != answer:
            return failed(f"streamed {answer[:60]!r} differs from the non-streamed "
                          f"{plain.answer.strip()[:60]!r} at temperature 0")
        same = "; equal to the non-streamed content" if plain is not None and plain.ok else ""
        return passed(f"streamed {answer[:80]!r}: {why}{same}")

    semantic = ctx.semantic(judge) if exchange.ok or exchange.status_code == 200 else \
        deferred("no answer to judge")
    return _explained(ctx, combine(
        "streaming", protocol, semantic,
        {"chunks": exchange.chunks, "ttft_s": exchange.ttft_s,
         "finish_reason": exchange.finish_reason, "done_marker": exchange.done_marker,
         "usage": exchange.usage.model_dump() if exchange.usage else None,
         "samples": [_sample("streamed", case.expected, exchange,
                             case.judge(exchange.answer)[0]).model_dump()]
         + ([_sample("not streamed", case.expected, plain,
                     case.judge(plain.answer)[0]).model_dump()] if plain is not None else [])}))


async def check_multi_turn(ctx: SuiteContext) -> CheckResult:
    case = ctx.options.cases.multi_turn
    messages: list[dict] = []
    exchanges: list[Exchange] = []
    for n, turn in enumerate(case.turns, 1):
        if exchanges:
            messages.append({"role": "assistant",
                             "content": exchanges[-1].answer.strip() or "OK"})
        messages.append(user(turn))
        exchanges.append(await ctx.ask(f"multi-turn-{n}", list(messages)))
    last = exchanges[-1]
    correct, why = case.judge(last.answer)
    sample = _sample(f"turn-{len(case.turns)}", case.expected, last, correct, why)
    protocol = protocol_verdict(exchanges, f"{len(exchanges)} turns answered 200, well-formed")
    return combine("multi-turn", protocol,
                   _semantic(ctx, "multi-turn", [sample],
                             "last turn recalled what an earlier turn said"),
                   {"samples": [sample.model_dump()]})


def _colour_correct(answer: str, expected: str) -> bool:
    words = re.findall(r"[a-z]+", answer.lower())
    named = {w for w in words if w in COLOUR_WORDS}
    return expected in named and len(named - {expected}) == 0


def colour_order(answer: str) -> list[str]:
    """Colour words in the order first named."""
    words = [w for w in re.findall(r"[a-z]+", answer.lower()) if w in COLOUR_WORDS]
    return [w for i, w in enumerate(words) if w not in words[:i]]


colour_correct = _colour_correct


def _media_check(ctx: SuiteContext, name: str, exchanges: list[Exchange],
                 samples: list[Sample], what: str, data: dict | None = None) -> CheckResult:
    protocol = protocol_verdict(exchanges, f"{len(exchanges)} media request(s) answered 200, "
                                           "well-formed")
    return _explained(ctx, combine(name, protocol, _semantic(ctx, name, samples, what),
                                   dict(data or {}, samples=[s.model_dump() for s in samples])))


async def check_solid_colours(ctx: SuiteContext) -> CheckResult:
    absent = _absent(ctx, "image-solid-colour", "image")
    if absent is not None:
        return absent
    samples, exchanges = [], []
    pixels = {}
    for fmt in ("PNG", "JPEG"):
        for colour in ("red", "blue", "green"):
            item = media.solid(colour, fmt=fmt)
            pixels[item.name] = media.pixel_census(item.data, limit=2)
            exchange = await ctx.ask(f"image-{item.name}", [user(
                item.content_part(), "What colour is this image? Answer with one word.")])
            exchanges.append(exchange)
            samples.append(_sample(item.name, colour, exchange,
                                   _colour_correct(exchange.answer, colour)))
    return _media_check(ctx, "image-solid-colour", exchanges, samples,
                        "solid-colour images named correctly (judged on their own; a bordered "
                        "or chart image passing does not override these)", {"pixels_sent": pixels})


async def check_bordered(ctx: SuiteContext) -> CheckResult:
    absent = _absent(ctx, "image-bordered", "image")
    if absent is not None:
        return absent
    item = media.bordered("red")
    exchange = await ctx.ask("image-bordered", [user(
        item.content_part(),
        "This image is a coloured square inside a black border. What colour is the square? "
        "Answer with one word.")])
    sample = _sample(item.name, "red", exchange, _colour_correct(
        exchange.answer.lower().replace("black", ""), "red"))
    return _media_check(ctx, "image-bordered", [exchange], [sample],
                        "bordered image named correctly")


async def check_chart(ctx: SuiteContext) -> CheckResult:
    absent = _absent(ctx, "image-chart", "image")
    if absent is not None:
        return absent
    item = media.chart()
    exchange = await ctx.ask("image-chart", [user(
        item.content_part(),
        "This bar chart has four bars labelled A, B, C and D from left to right. Which label "
        "has the tallest bar? Answer with the letter only.")])
    letters = re.findall(r"\b([ABCD])\b", exchange.answer)
    sample = _sample(item.name, item.truth, exchange, letters[:1] == [item.truth])
    return _media_check(ctx, "image-chart", [exchange], [sample], "chart read correctly")


VIDEO_QUESTION = ("The video shows a sequence of solid colours. List the colours in the order "
                  "they appear, separated by commas, nothing else.")


async def check_video(ctx: SuiteContext) -> CheckResult:
    absent = _absent(ctx, "video-colour-order", "video")
    if absent is not None:
        return absent
    try:
        item = media.colour_video()
    except media.MediaUnavailable as exc:
        return CheckResult(name="video-colour-order", status=Status.DEFERRED,
                           detail=f"could not make the test video here: {exc}")
    order = item.truth.split(",")
    exchange = await ctx.ask("video-colours", [user(item.content_part(), VIDEO_QUESTION)])
    sample = _sample(item.name, item.truth, exchange, colour_order(exchange.answer) == order)
    return _media_check(ctx, "video-colour-order", [exchange], [sample],
                        "video colour order named correctly")


INVALID_BODIES: dict[str, dict] = {
    "negative-max-tokens": {"max_tokens": -5},
    "temperature-out-of-range": {"temperature": -1.0},
    "messages-not-a-list": {"messages": "hello"},
    "unknown-model": {"model": "imagekit-no-such-model"},
}


async def check_invalid_parameters(ctx: SuiteContext) -> CheckResult:
    bad = []
    codes = {}
    for name, change in INVALID_BODIES.items():
        body = ctx.body([user("Say hello.")])
        body.update(change)
        exchange = await ctx.send(f"invalid-{name}", body)
        codes[name] = exchange.status_code
        if exchange.status_code is None or not 400 <= exchange.status_code < 500:
            got = (f"HTTP {exchange.status_code}" if exchange.status_code is not None
                   else exchange.error)
            bad.append(f"{name}: {got} from {ctx.engine} ({server_words(exchange, 80)!r})")
    protocol = failed("; ".join(bad) + " (expected 4xx)") if bad else passed(
        f"all {len(codes)} invalid requests answered 4xx: {codes}")
    return _explained(ctx, combine("invalid-parameters", protocol, None,
                                   {"status_codes": codes}))


async def check_recovery(ctx: SuiteContext, name: str = "recovery") -> CheckResult:
    """After failed requests, a normal request gets a well-formed 200: the process survived.
    Protocol only (what the model says is not the point); an image request is added where the
    server has the image capability."""
    exchanges = [await ctx.ask(f"{name}-text", [user("Reply with the word READY only.")],
                               max_tokens=min(ctx.options.max_tokens, 64))]
    caps = ctx.capabilities
    if caps is None or caps.image.present:
        item = media.bordered("red")
        exchanges.append(await ctx.ask(f"{name}-image", [user(
            item.content_part(), "What colour is the square inside the border? One word.")],
            max_tokens=min(ctx.options.max_tokens, 64)))
    kinds = " and ".join(e.label.rsplit("-", 1)[1] for e in exchanges)
    protocol = protocol_verdict(exchanges, f"a normal {kinds} request got a well-formed 200 "
                                           "after the failed ones: the server process survived")
    return _explained(ctx, combine(name, protocol, None))


CHECKS: list[Callable[[SuiteContext], Awaitable[CheckResult]]] = [
    lambda ctx: check_mode(ctx, "disabled"),
    lambda ctx: check_mode(ctx, "adaptive"),
    lambda ctx: check_mode(ctx, "enabled"),
    check_tools,
    check_streaming,
    check_multi_turn,
    check_solid_colours,
    check_bordered,
    check_chart,
    check_video,
    check_invalid_parameters,
    check_recovery,
]


def _median(values: list) -> float | None:
    known = sorted(v for v in values if v is not None)
    return known[len(known) // 2] if known else None


def compare_modes(ctx: SuiteContext, checks: list[CheckResult]) -> CheckResult:
    """The record's mode comparison: each mode's correctness, output tokens and latency side
    by side; the mode to prefer is the most correct one, and only among equally correct modes
    the shorter and faster one (a shorter wrong answer is never preferred)."""
    rows = []
    for check in checks:
        mode = check.data.get("mode")
        samples = check.data.get("samples") or []
        if not mode or not samples:
            continue
        rows.append({"mode": mode, "correct": sum(bool(s["correct"]) for s in samples),
                     "reproductions": len(samples),
                     "output_tokens": _median([s["output_tokens"] for s in samples]),
                     "latency_s": _median([s["latency_s"] for s in samples]),
                     "answers": sorted({s["answer"][:60] for s in samples})})
    table = "; ".join(f"{r['mode']}: {r['correct']}/{r['reproductions']} correct (answered "
                      f"{', '.join(repr(a) for a in r['answers'])}), {r['output_tokens']} "
                      f"output tokens, {r['latency_s']:.2f}s" if r["latency_s"] is not None
                      else f"{r['mode']}: {r['correct']}/{r['reproductions']} correct"
                      for r in rows)
    data: dict = {"modes": rows}
    if len(rows) < 2:
        return CheckResult(name="mode-comparison", status=Status.DEFERRED, data=data,
                           detail=f"fewer than two modes answered: nothing to compare ({table})")
    # latency is listed, not ranked on: on a shared machine it is noise between equal modes
    ranked = sorted(rows, key=lambda r: (-r["correct"] / r["reproductions"],
                                         r["output_tokens"] if r["output_tokens"] is not None
                                         else float("inf")))
    best = ranked[0]
    shorter_wrong = [r["mode"] for r in rows
                     if r["correct"] < best["correct"] and r["output_tokens"] is not None
                     and best["output_tokens"] is not None
                     and r["output_tokens"] < best["output_tokens"]]
    data.update(preferred=best["mode"], shorter_but_wrong=shorter_wrong)

    def judge() -> Verdict:
        note = (f"; not preferred although shorter: {', '.join(shorter_wrong)} (fewer right "
                "answers)" if shorter_wrong else "")
        if best["correct"] < best["reproductions"]:
            return failed(f"no mode answered every reproduction right: {table}{note}")
        return passed(f"preferred {best['mode']} (most correct, then fewer tokens): "
                      f"{table}{note}")

    semantic = ctx.semantic(judge)
    return CheckResult(name="mode-comparison", status=semantic.status,
                       detail=f"semantic {semantic.status.value}: {semantic.detail}",
                       data=dict(data, protocol=None, semantic=semantic.as_dict()))


async def run(ctx: SuiteContext) -> list[CheckResult]:
    checks = [await check(ctx) for check in CHECKS]
    return checks + [compare_modes(ctx, checks)]
