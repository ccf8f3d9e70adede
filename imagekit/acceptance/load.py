"""Load rounds: keep `concurrency` streamed requests in flight until `requests` are done, then
count completions, errors and tokens and check them against the matrix's expectations; measure
TTFT, inter-chunk latency (ITL) and end-to-end latency percentiles.

Prompt length without a tokenizer: prompts are words from a vocabulary of short common English
words; two calibration requests (1 word and 1,001 words, `max_tokens=1`) measure the server's
tokens per word and its chat-template overhead, and every prompt is sized from that line. The
server's own `usage.prompt_tokens` is what the input check compares.

ITL here is the gap between consecutive content-bearing SSE chunks; an engine that sends several
tokens per chunk (speculative decoding) shows larger, fewer gaps.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from imagekit.acceptance.client import ChatClient
from imagekit.acceptance.matrix import Expectations
from imagekit.acceptance.models import (
    LatencyStats,
    RequestRecord,
    RoundResult,
    RoundSpec,
    TimingDefinitions,
)
from imagekit.results import CheckResult, Status

VOCAB = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "year", "day",
    "way", "man", "world", "life", "hand", "part", "place", "case", "week", "work", "fact",
    "group", "number", "point", "home", "water", "room", "money", "story", "night",
]


def percentiles(values: list[float]) -> LatencyStats:
    """Linear-interpolated percentiles; an empty list yields count 0 and no numbers."""
    if not values:
        return LatencyStats()
    data = sorted(values)

    def q(p: float) -> float:
        pos = (len(data) - 1) * p
        lo = int(pos)
        hi = min(lo + 1, len(data) - 1)
        return round(data[lo] + (data[hi] - data[lo]) * (pos - lo), 6)

    return LatencyStats(count=len(data), mean=round(sum(data) / len(data), 6), p50=q(0.5),
                        p90=q(0.9), p99=q(0.99), max=round(data[-1], 6))


@dataclass(frozen=True)
class Calibration:
    """prompt_tokens ≈ overhead + per_word x words, as measured against this server."""

    per_word: float = 1.0
    overhead: float = 0.0
    measured: bool = False
    note: str = "not measured: 1 token per word assumed"

    def words_for(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead) / self.per_word))


async def calibrate(client: ChatClient, model: str, fields: dict[str, Any]) -> Calibration:
    async def tokens(words: int) -> int | None:
        body = {"model": model, "max_tokens": 1, "stream": False, **fields,
                "messages": [{"role": "user", "content": " ".join(VOCAB[i % len(VOCAB)]
                                                                    for i in range(words))}]}
        body.pop("stream_options", None)
        exchange = await client.chat("calibrate", body)
        return exchange.usage.prompt_tokens if exchange.ok and exchange.usage else None

    small, large = await tokens(1), await tokens(1001)
    if small is None or large is None or large <= small:
        return Calibration(note=f"calibration failed (prompt_tokens {small}, {large}): "
                                "1 token per word assumed")
    per_word = (large - small) / 1000
    return Calibration(per_word=per_word, overhead=small - per_word, measured=True,
                       note=f"{per_word:.3f} tokens/word, {small - per_word:.1f} tokens overhead")


class BodyFactory:
    """Builds request `i` of a round lazily (memory stays flat for long rounds)."""

    def __init__(self, model: str, spec: RoundSpec, calibration: Calibration,
                 fields: dict[str, Any], media_part: dict | None = None, seed: int = 0) -> None:
        self.model, self.spec, self.fields, self.media_part = model, spec, fields, media_part
        self.words = calibration.words_for(spec.input_tokens)
        self.seed = seed

    def __call__(self, i: int) -> dict[str, Any]:
        rng = random.Random(self.seed * 1_000_003 + self.spec.index * 10_007 + i)
        text = " ".join(rng.choices(VOCAB, k=self.words))
        content: Any = text
        if self.media_part is not None:
            content = [self.media_part, {"type": "text", "text": text}]
        body = {"model": self.model, "messages": [{"role": "user", "content": content}],
                "max_tokens": self.spec.output_tokens, "stream": True,
                "stream_options": {"include_usage": True}, "temperature": 0.0}
        body.update(self.fields)
        return body


def tpot(ttft_s: float | None, e2e_s: float, completion_tokens: int | None) -> float | None:
    """Time per output token after the first (vLLM bench serve's TPOT)."""
    if ttft_s is None or not completion_tokens or completion_tokens < 2:
        return None
    return max(0.0, e2e_s - ttft_s) / (completion_tokens - 1)


def arrivals(spec: RoundSpec, seed: int = 0) -> list[float]:
    """Open-loop Poisson send times (seconds from the round's start), seeded by the round."""
    assert spec.rate is not None
    rng = random.Random(seed * 1_000_003 + spec.index)
    at, out = 0.0, []
    for _ in range(spec.requests):
        out.append(at)
        at += rng.expovariate(spec.rate)
    return out


async def run_round(client: ChatClient, spec: RoundSpec, make_body: Callable[[int], dict],
                    on_done: Callable[[], None] | None = None,
                    failures: list[dict] | None = None) -> RoundResult:
    """Run one round; failed requests' bodies and answers go to `failures` when given.
    Closed loop: `concurrency` workers; open loop (`spec.rate`): each request sent at its
    Poisson arrival time, whatever is still in flight (so queueing shows in TTFT)."""
    records: list[RequestRecord | None] = [None] * spec.requests
    gaps: list[float] = []
    slo = spec.slo

    async def one(i: int, sent_at: float | None) -> None:
        body = make_body(i)
        out = await client.stream(body)
        usage = out.usage or {}
        error = out.error
        if error is None and out.status_code != 200:
            error = f"HTTP {out.status_code}"
        completion = usage.get("completion_tokens")
        per_token = tpot(out.ttft_s, out.e2e_s, completion) if error is None else None
        records[i] = RequestRecord(
            i=i, status_code=out.status_code, error=error, ttft_s=out.ttft_s,
            e2e_s=out.e2e_s, prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=completion, chunks=out.chunks,
            finish_reason=out.finish_reason, tpot_s=per_token,
            slo_met=None if slo is None else
            (error is None and slo.met(out.ttft_s, per_token, out.e2e_s)),
            sent_at_s=sent_at)
        gaps.extend(out.gaps)
        if error is not None and failures is not None:
            failures.append({"i": i, "error": error, "status_code": out.status_code,
                             "response": out.body, "request": body})
        if on_done is not None:
            on_done()

    start = time.perf_counter()
    if spec.rate:
        tasks = []
        for i, at in enumerate(arrivals(spec)):
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i, round(time.perf_counter() - start, 6))))
        await asyncio.gather(*tasks)
    else:
        pending = iter(range(spec.requests))

        async def worker() -> None:
            for i in pending:
                await one(i, None)

        await asyncio.gather(*(worker() for _ in range(min(spec.concurrency, spec.requests))))
    duration = time.perf_counter() - start
    done = [r for r in records if r is not None]
    ok = [r for r in done if r.error is None]
    completion = sum(r.completion_tokens or 0 for r in ok)
    goodput = None if slo is None else round(sum(bool(r.slo_met) for r in done) /
                                             spec.requests, 6)
    return RoundResult(
        spec=spec, duration_s=round(duration, 6), completed=len(ok),
        errors=spec.requests - len(ok), prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        completion_tokens=completion, requests_per_s=round(len(ok) / duration, 3),
        output_tokens_per_s=round(completion / duration, 3),
        ttft=percentiles([r.ttft_s for r in ok if r.ttft_s is not None]),
        itl=percentiles(gaps), e2e=percentiles([r.e2e_s for r in ok]),
        tpot=percentiles([r.tpot_s for r in ok if r.tpot_s is not None]),
        arrival="poisson" if spec.rate else "closed", goodput=goodput, records=done,
        definitions=TimingDefinitions())


def judge_round(result: RoundResult, expect: Expectations) -> CheckResult:
    """Completions, errors and tokens against the matrix's expectations."""
    spec = result.spec
    problems = []
    if result.errors > expect.max_errors:
        kinds = sorted({(r.error or "")[:60] for r in result.records if r.error})[:3]
        problems.append(f"{result.errors} errors (max {expect.max_errors}): {kinds}")
    if result.completed + result.errors != spec.requests:
        problems.append(f"{result.completed + result.errors} outcomes for {spec.requests} "
                        "requests")
    ok = [r for r in result.records if r.error is None]
    no_usage = sum(r.completion_tokens is None for r in ok)
    if no_usage:
        problems.append(f"{no_usage} completions without usage token counts")
    if expect.exact_output_tokens:
        off = [r.completion_tokens for r in ok
               if r.completion_tokens is not None and r.completion_tokens != spec.output_tokens]
        if off:
            problems.append(f"{len(off)} completions not exactly {spec.output_tokens} output "
                            f"tokens (e.g. {off[0]})")
    else:
        over = [r for r in ok if (r.completion_tokens or 0) > spec.output_tokens]
        if over:
            problems.append(f"{len(over)} completions over {spec.output_tokens} output tokens")
    low = spec.input_tokens * (1 - expect.input_tolerance)
    high = spec.input_tokens * (1 + expect.input_tolerance)
    measured = [r.prompt_tokens for r in ok if r.prompt_tokens is not None]
    if spec.modality == "text":
        outside = [t for t in measured if not low <= t <= high]
    else:
        outside = [t for t in measured if t < low]
    if outside:
        problems.append(f"{len(outside)} prompts outside {spec.input_tokens} ±"
                        f"{expect.input_tolerance:.0%} input tokens (e.g. {outside[0]})")
    if spec.slo is not None and result.goodput is not None and \
            result.goodput < spec.slo.goodput_floor:
        problems.append(f"goodput {result.goodput:.0%} below the floor "
                        f"{spec.slo.goodput_floor:.0%} (SLO {spec.slo.describe()})")
    summary = (f"{result.completed}/{spec.requests} completed, {result.errors} errors, "
               f"{result.prompt_tokens} in / {result.completion_tokens} out tokens, "
               f"{result.requests_per_s:.2f} req/s, TTFT p50 {_ms(result.ttft.p50)} p99 "
               f"{_ms(result.ttft.p99)}, TPOT p50 {_ms(result.tpot.p50)} p99 "
               f"{_ms(result.tpot.p99)}, ITL p50 {_ms(result.itl.p50)}, E2E p50 "
               f"{_ms(result.e2e.p50)} p99 {_ms(result.e2e.p99)}")
    if spec.rate:
        summary += f", open-loop Poisson {spec.rate:g} req/s"
    if spec.slo is not None and result.goodput is not None:
        summary += (f", goodput {result.goodput:.0%} (floor {spec.slo.goodput_floor:.0%}, SLO "
                    f"{spec.slo.describe()})")
    return CheckResult(name=spec.name, status=Status.FAIL if problems else Status.PASS,
                       detail="; ".join(problems) + f" ({summary})" if problems else summary,
                       data=result.model_dump(exclude={"records"}))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}ms"


def totals_check(results: list[RoundResult], round_checks: list[CheckResult]) -> CheckResult:
    """Whole-matrix counts; passes only when every round passed its own expectations."""
    requests = sum(r.spec.requests for r in results)
    completed = sum(r.completed for r in results)
    errors = sum(r.errors for r in results)
    return CheckResult(
        name="matrix-totals",
        status=Status.PASS if round_checks and all(c.status is Status.PASS for c in round_checks)
        else Status.FAIL,
        detail=f"{len(results)} rounds, {requests} requests, {completed} completed, {errors} "
               f"errors, {sum(r.prompt_tokens for r in results)} input / "
               f"{sum(r.completion_tokens for r in results)} output tokens",
        data={"rounds": len(results), "requests": requests, "completed": completed,
              "errors": errors})
