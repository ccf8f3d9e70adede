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
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from imagekit.acceptance.client import ChatClient
from imagekit.acceptance.datasets import Entry, Loaded, Turn
from imagekit.acceptance.kernel_stamps import stamp_source, take_read_lags
from imagekit.acceptance.matrix import Expectations
from imagekit.acceptance.models import (
    LatencyStats,
    RequestRecord,
    RoundResult,
    RoundSpec,
    Saturation,
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


def percentiles(values: list[float], chosen: list[float] | tuple[float, ...] = ()
                ) -> LatencyStats:
    """Linear-interpolated percentiles (p50/p90/p99 always, `chosen` besides, keyed "p99.9");
    an empty list yields count 0 and no numbers."""
    if not values:
        return LatencyStats()
    data = sorted(values)

    def q(p: float) -> float:
        pos = (len(data) - 1) * p
        lo = int(pos)
        hi = min(lo + 1, len(data) - 1)
        return round(data[lo] + (data[hi] - data[lo]) * (pos - lo), 6)

    return LatencyStats(count=len(data), mean=round(sum(data) / len(data), 6), p50=q(0.5),
                        p90=q(0.9), p99=q(0.99), max=round(data[-1], 6),
                        percentiles={f"p{p:g}": q(p / 100) for p in chosen})


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


def _words(rng: random.Random, count: int) -> str:
    return " ".join(rng.choices(VOCAB, k=count))


def _request_rng(seed: int, round_index: int, i: int) -> random.Random:
    """The random words of request `i` of a round: the same for every rerun of the matrix."""
    return random.Random(seed * 1_000_003 + round_index * 10_007 + i)


def _chat_body(model: str, messages: list[dict], max_tokens: int,
               fields: dict[str, Any]) -> dict[str, Any]:
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True}, "temperature": 0.0}
    body.update(fields)
    return body


class BodyFactory:
    """Builds request `i` of a round lazily (memory stays flat for long rounds)."""

    def __init__(self, model: str, spec: RoundSpec, calibration: Calibration,
                 fields: dict[str, Any], media_part: dict | None = None, seed: int = 0) -> None:
        self.model, self.spec, self.fields, self.media_part = model, spec, fields, media_part
        self.words = calibration.words_for(spec.input_tokens or 1)
        self.seed = seed or spec.seed

    def __call__(self, i: int) -> dict[str, Any]:
        text = _words(_request_rng(self.seed, self.spec.index, i), self.words)
        content: Any = text
        if self.media_part is not None:
            content = [self.media_part, {"type": "text", "text": text}]
        return _chat_body(self.model, [{"role": "user", "content": content}],
                          self.spec.output_tokens or 1, self.fields)


@runtime_checkable
class RoundBodies(Protocol):
    """What a round sends: `units` sequences of requests (one request, or a conversation's
    turns in order), each started at `at(unit)` seconds (a trace) or whenever a worker is
    free; `body` builds a turn's request from the conversation so far."""

    def units(self) -> int: ...
    def turns(self, unit: int) -> int: ...
    def at(self, unit: int) -> float | None: ...
    def body(self, unit: int, turn: int, history: list[dict]) -> dict[str, Any]: ...
    def targets(self, unit: int, turn: int) -> tuple[int | None, int | None]: ...
    def warmup_body(self, k: int) -> dict[str, Any]: ...


class SingleRequests:
    """A round of independent requests built by `make_body(i)` (BodyFactory); warm-up
    requests are the ones that would come after the round's, so they share no prompt with it."""

    def __init__(self, make_body: Callable[[int], dict], requests: int) -> None:
        self.make_body, self.requests = make_body, requests

    def units(self) -> int:
        return self.requests

    def turns(self, unit: int) -> int:
        return 1

    def at(self, unit: int) -> float | None:
        return None

    def body(self, unit: int, turn: int, history: list[dict]) -> dict[str, Any]:
        return self.make_body(unit)

    def targets(self, unit: int, turn: int) -> tuple[int | None, int | None]:
        """Nothing per request: the round's spec holds its lengths."""
        return None, None

    def warmup_body(self, k: int) -> dict[str, Any]:
        return self.make_body(self.requests + k)


class DatasetBodies:
    """A dataset's entries in file order (from its start again past its end): prompts as
    written, or sized random words for a trace row's `input_length`; `max_tokens` from the
    block's `output_tokens`, else the row's length (a ShareGPT reply's words through the
    calibration). Warm-up requests are the entries after the round's."""

    def __init__(self, model: str, spec: RoundSpec, calibration: Calibration,
                 fields: dict[str, Any], loaded: Loaded) -> None:
        self.model, self.spec, self.fields = model, spec, fields
        self.calibration = calibration
        self.found = loaded.entries
        self.trace = spec.dataset is not None and spec.dataset.format == "trace"
        total, used = 0, 0
        while total < spec.requests:
            total += len(self.found[used % len(self.found)].turns)
            used += 1
        self.used = used

    def entry(self, unit: int) -> Entry:
        return self.found[unit % len(self.found)]

    def units(self) -> int:
        return self.used

    def turns(self, unit: int) -> int:
        return len(self.entry(unit).turns)

    def at(self, unit: int) -> float | None:
        return self.entry(unit).at_s if self.trace else None

    def max_tokens(self, turn: Turn) -> int:
        if self.spec.output_tokens is not None:
            return self.spec.output_tokens
        if turn.output_tokens is not None:
            return turn.output_tokens
        return max(1, round((turn.reply_words or 1) * self.calibration.per_word))

    def body(self, unit: int, turn: int, history: list[dict]) -> dict[str, Any]:
        step = self.entry(unit).turns[turn]
        text = step.prompt
        if text is None:
            text = _words(_request_rng(self.spec.seed, self.spec.index, unit),
                          self.calibration.words_for(step.input_tokens or 1))
        return _chat_body(self.model, [*history, {"role": "user", "content": text}],
                          self.max_tokens(step), self.fields)

    def targets(self, unit: int, turn: int) -> tuple[int | None, int | None]:
        step = self.entry(unit).turns[turn]
        return step.input_tokens, self.max_tokens(step)

    def warmup_body(self, k: int) -> dict[str, Any]:
        return self.body(self.used + k, 0, [])

    def __call__(self, i: int) -> dict[str, Any]:
        """The round's first request, as kept in the evidence."""
        return self.body(i, 0, [])


def tpot(ttft_s: float | None, e2e_s: float, completion_tokens: int | None) -> float | None:
    """Time per output token after the first (vLLM bench serve's TPOT)."""
    if ttft_s is None or not completion_tokens or completion_tokens < 2:
        return None
    return max(0.0, e2e_s - ttft_s) / (completion_tokens - 1)


def arrivals(spec: RoundSpec, count: int | None = None) -> list[float]:
    """Open-loop send times (seconds from the round's start), seeded by the matrix's seed and
    the round. Gaps are exponential (Poisson) at burstiness 1, else gamma with shape =
    burstiness and scale = 1 / (rate x burstiness), as vLLM bench serve draws them: the same
    mean rate, a coefficient of variation of 1 / sqrt(burstiness)."""
    assert spec.rate is not None
    rng = random.Random(spec.seed * 1_000_003 + spec.index)
    shape = spec.burstiness
    at, out = 0.0, []
    for _ in range(spec.requests if count is None else count):
        out.append(at)
        at += rng.expovariate(spec.rate) if shape == 1 else \
            rng.gammavariate(shape, 1.0 / (spec.rate * shape))
    return out


def _arrival_kind(spec: RoundSpec) -> Literal["closed", "poisson", "gamma", "trace"]:
    if spec.dataset is not None and spec.dataset.format == "trace":
        return "trace"
    if spec.rate:
        return "poisson" if spec.burstiness == 1 else "gamma"
    return "closed"


async def run_round(client: ChatClient, spec: RoundSpec,
                    make_body: Callable[[int], dict] | RoundBodies,
                    on_done: Callable[[], None] | None = None,
                    failures: list[dict] | None = None) -> RoundResult:
    """Run one round; failed requests' bodies and answers go to `failures` when given.
    First the warm-up requests (closed loop, recorded apart), then the round's clock starts.
    Closed loop: `concurrency` workers, each taking the next unit (a request, or a whole
    conversation, turn after turn); open loop (`spec.rate`, a trace): each unit started at its
    arrival time, whatever is still in flight (so queueing shows in TTFT)."""
    bodies = make_body if isinstance(make_body, RoundBodies) else \
        SingleRequests(make_body, spec.requests)
    units = bodies.units()
    offsets, total = [], 0
    for u in range(units):
        offsets.append(total)
        total += bodies.turns(u)
    multi_turn = spec.dataset is not None and spec.dataset.multi_turn
    records: list[RequestRecord | None] = [None] * total
    warm: list[RequestRecord | None] = [None] * spec.warmup_requests
    gaps: list[float] = []
    slo = spec.slo
    clock = {"start": time.perf_counter()}

    async def send(i: int, body: dict, sink: list[RequestRecord | None], *,
                   unit: int | None = None, turn: int | None = None) -> str | None:
        """One request, recorded at `sink[i]`; the answer's text (multi-turn history)."""
        sent_at = round(time.perf_counter() - clock["start"], 6)
        out = await client.stream(body, keep_text=multi_turn)
        usage = out.usage or {}
        error = out.error
        if error is None and out.status_code != 200:
            error = f"HTTP {out.status_code}"
        completion = usage.get("completion_tokens")
        per_token = tpot(out.ttft_s, out.e2e_s, completion) if error is None else None
        aimed, sent_max = (None, None) if unit is None else bodies.targets(unit, turn or 0)
        sink[i] = RequestRecord(
            i=i, status_code=out.status_code, error=error, ttft_s=out.ttft_s,
            e2e_s=out.e2e_s, prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=completion, chunks=out.chunks,
            finish_reason=out.finish_reason, tpot_s=per_token,
            slo_met=None if slo is None else
            (error is None and slo.met(out.ttft_s, per_token, out.e2e_s)),
            sent_at_s=sent_at, itl_ms=[round(g * 1000, 3) for g in out.gaps],
            conversation=unit if multi_turn else None, turn=turn if multi_turn else None,
            input_target=aimed, max_tokens=sent_max)
        if sink is records:
            gaps.extend(out.gaps)
            if on_done is not None:
                on_done()
        if error is not None and failures is not None:
            failures.append({"i": i, "error": error, "status_code": out.status_code,
                             "response": out.body, "request": body,
                             **({"warmup": True} if sink is warm else {})})
        return None if error is not None else "".join(out.content)

    async def conversation(u: int) -> None:
        history: list[dict] = []
        for t in range(bodies.turns(u)):
            body = bodies.body(u, t, history)
            answer = await send(offsets[u] + t, body, records, unit=u, turn=t)
            if answer is None:
                for rest in range(t + 1, bodies.turns(u)):
                    records[offsets[u] + rest] = RequestRecord(
                        i=offsets[u] + rest, status_code=None, conversation=u, turn=rest,
                        error=f"not sent: turn {t} of this conversation failed",
                        slo_met=None if slo is None else False)
                    if on_done is not None:
                        on_done()
                return
            history = [*body["messages"], {"role": "assistant", "content": answer}]

    async def closed(count: int, run: Callable[[int], Awaitable[None]], width: int) -> None:
        pending = iter(range(count))

        async def worker() -> None:
            for k in pending:
                await run(k)

        await asyncio.gather(*(worker() for _ in range(max(1, min(width, count)))))

    if spec.warmup_requests:
        async def warm_one(k: int) -> None:
            await send(k, bodies.warmup_body(k), warm)
        await closed(spec.warmup_requests, warm_one, spec.concurrency)
    take_read_lags()                       # the round's reads only, not the warm-up's
    start = clock["start"] = time.perf_counter()
    kind = _arrival_kind(spec)
    if kind == "closed":
        await closed(units, conversation, spec.concurrency)
    else:
        times = arrivals(spec, units) if kind != "trace" else \
            [bodies.at(u) or 0.0 for u in range(units)]
        tasks = []
        for u, at in enumerate(times):
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(conversation(u)))
        await asyncio.gather(*tasks)
    duration = time.perf_counter() - start
    lags, beyond, unstamped = take_read_lags()
    done = [r for r in records if r is not None]
    ok = [r for r in done if r.error is None]
    completion = sum(r.completion_tokens or 0 for r in ok)
    goodput = None if slo is None else round(sum(bool(r.slo_met) for r in done) /
                                             spec.requests, 6)
    chosen = spec.percentiles
    offered = achieved = reason = None
    if spec.saturation is not None:
        offered, achieved, reason = saturation(done, spec.saturation)
    itl = percentiles(gaps, chosen)
    read_lag = percentiles(lags, chosen) if lags else None
    bound = client_bound(read_lag, itl)
    return RoundResult(
        spec=spec, duration_s=round(duration, 6), completed=len(ok),
        errors=spec.requests - len(ok), prompt_tokens=sum(r.prompt_tokens or 0 for r in ok),
        completion_tokens=completion, requests_per_s=round(len(ok) / duration, 3),
        output_tokens_per_s=round(completion / duration, 3),
        ttft=percentiles([r.ttft_s for r in ok if r.ttft_s is not None], chosen),
        itl=itl, e2e=percentiles([r.e2e_s for r in ok], chosen),
        tpot=percentiles([r.tpot_s for r in ok if r.tpot_s is not None], chosen),
        arrival=kind, goodput=goodput, records=done,
        warmup=[r for r in warm if r is not None], offered_requests_per_s=offered,
        completed_requests_per_s=achieved, saturated=reason is not None,
        saturation_reason=reason, definitions=TimingDefinitions(
            stamps=stamp_source(len(lags) + beyond, unstamped)),
        read_lag=read_lag, client_bound=bound is not None, client_bound_reason=bound,
        shared_reads=sum(1 for gap in gaps if gap == 0.0))


def client_bound(read_lag: LatencyStats | None, itl: LatencyStats) -> str | None:
    """Why a round's tails are the client's (None when they are not): its reads came, at p99,
    a whole median gap after the kernel had the bytes, so a stream's next event was often
    already waiting and shares the earlier one's read and stamp."""
    if read_lag is None or read_lag.p99 is None or itl.p50 is None or read_lag.p99 < itl.p50:
        return None
    return (f"the client read {read_lag.p99 * 1e3:.2f} ms after the bytes came at p99 "
            f"(max {(read_lag.max or 0) * 1e3:.2f} ms), at or above the median gap between "
            f"events ({itl.p50 * 1e3:.2f} ms): events that share a read share its stamp, so "
            f"TTFT and ITL tails may include the client's delay; run fewer streams per client "
            f"process or give it a core of its own")


def saturation(records: list[RequestRecord], rule: Saturation
               ) -> tuple[float | None, float | None, str | None]:
    """(offered req/s, completed req/s, why saturated or None) of an open-loop round.

    Offered: (sent - 1) / (last send - first send). Completed: (finished - 1) / (last finish
    - first finish), successful requests only. Saturated when completed < (1 -
    rate_shortfall) x offered (the server fell behind the senders), or when the median TTFTs
    of the requests' thirds (in send order) rise from one third to the next, the last at least
    ttft_growth x the first and larger by ttft_growth_min_ms (requests queued longer and
    longer; a single clump of bursty arrivals raises one third only)."""
    sent = sorted(r.sent_at_s for r in records if r.sent_at_s is not None)
    ok = sorted((r for r in records if r.error is None and r.sent_at_s is not None),
                key=lambda r: r.sent_at_s or 0.0)
    finished = sorted((r.sent_at_s or 0.0) + r.e2e_s for r in ok)
    offered = achieved = None
    if len(sent) >= 3 and sent[-1] > sent[0]:
        offered = round((len(sent) - 1) / (sent[-1] - sent[0]), 3)
    if len(finished) >= 2 and finished[-1] > finished[0]:
        achieved = round((len(finished) - 1) / (finished[-1] - finished[0]), 3)
    reasons = []
    if offered is not None and achieved is not None and \
            achieved < (1 - rule.rate_shortfall) * offered:
        reasons.append(f"completed {achieved:.2f} req/s of the {offered:.2f} req/s sent "
                       f"(below {1 - rule.rate_shortfall:.0%})")
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    third = len(ttfts) // 3
    if third >= 2:
        early, middle, late = (statistics.median(ttfts[:third]),
                               statistics.median(ttfts[third:-third]),
                               statistics.median(ttfts[-third:]))
        if early < middle < late and late >= rule.ttft_growth * early and \
                late - early >= rule.ttft_growth_min_ms / 1000:
            reasons.append(f"TTFT grew across the round: median {_ms(early)} in the first "
                           f"third, {_ms(middle)} in the second, {_ms(late)} in the last")
    return offered, achieved, "; ".join(reasons) or None


def judge_round(result: RoundResult, expect: Expectations) -> CheckResult:
    """Completions, errors and tokens against the matrix's expectations; goodput against its
    floor unless the round is past saturation (then it is said, not judged)."""
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

    def asked(r: RequestRecord) -> int:
        return r.max_tokens if r.max_tokens is not None else spec.output_tokens or 0

    if expect.exact_output_tokens:
        off = [(r.completion_tokens, asked(r)) for r in ok
               if r.completion_tokens is not None and r.completion_tokens != asked(r)]
        if off:
            problems.append(f"{len(off)} completions not exactly their max_tokens output "
                            f"tokens (e.g. {off[0][0]} of {off[0][1]})"
                            if spec.output_tokens is None else
                            f"{len(off)} completions not exactly {spec.output_tokens} output "
                            f"tokens (e.g. {off[0][0]})")
    else:
        over = [r for r in ok if (r.completion_tokens or 0) > asked(r)]
        if over:
            problems.append(f"{len(over)} completions over "
                            f"{spec.output_tokens or 'their max_tokens'} output tokens")
    outside = []
    for r in ok:
        aimed = r.input_target if r.input_target is not None else spec.input_tokens
        if aimed is None or r.prompt_tokens is None:
            continue
        low, high = aimed * (1 - expect.input_tolerance), aimed * (1 + expect.input_tolerance)
        if not low <= r.prompt_tokens <= high if spec.modality == "text" else \
                r.prompt_tokens < low:
            outside.append((r.prompt_tokens, aimed))
    if outside:
        problems.append(f"{len(outside)} prompts outside {outside[0][1]} ±"
                        f"{expect.input_tolerance:.0%} input tokens (e.g. {outside[0][0]})"
                        if spec.input_tokens is not None else
                        f"{len(outside)} prompts outside their trace length ±"
                        f"{expect.input_tolerance:.0%} (e.g. {outside[0][0]} for "
                        f"{outside[0][1]})")
    if spec.slo is not None and result.goodput is not None and not result.saturated and \
            result.goodput < spec.slo.goodput_floor:
        problems.append(f"goodput {result.goodput:.0%} below the floor "
                        f"{spec.slo.goodput_floor:.0%} (SLO {spec.slo.describe()})")
    summary = (f"{result.completed}/{spec.requests} completed, {result.errors} errors, "
               f"{result.prompt_tokens} in / {result.completion_tokens} out tokens, "
               f"{result.requests_per_s:.2f} req/s, TTFT p50 {_ms(result.ttft.p50)} p99 "
               f"{_ms(result.ttft.p99)}, TPOT p50 {_ms(result.tpot.p50)} p99 "
               f"{_ms(result.tpot.p99)}, ITL p50 {_ms(result.itl.p50)}, E2E p50 "
               f"{_ms(result.e2e.p50)} p99 {_ms(result.e2e.p99)}")
    extra = {k: v for k, v in result.e2e.percentiles.items() if k not in ("p50", "p99")}
    if extra:
        summary += ", E2E " + " ".join(f"{k} {_ms(v)}" for k, v in extra.items())
    if spec.rate:
        summary += (f", open-loop Poisson {spec.rate:g} req/s" if spec.burstiness == 1 else
                    f", open-loop gamma {spec.rate:g} req/s burstiness {spec.burstiness:g}")
    if result.arrival == "trace":
        summary += f", trace replayed ({spec.dataset.label if spec.dataset else ''})"
    if spec.warmup_requests:
        lost = sum(r.error is not None for r in result.warmup)
        summary += f", {spec.warmup_requests} warm-up requests not counted"
        if lost:
            summary += f" ({lost} failed)"
    if spec.slo is not None and result.goodput is not None:
        summary += (f", goodput {result.goodput:.0%} (floor {spec.slo.goodput_floor:.0%}, SLO "
                    f"{spec.slo.describe()})")
    if result.saturated:
        summary = (f"saturated: {result.saturation_reason}; goodput not judged past "
                   f"saturation ({summary})")
    data = result.model_dump(exclude={"records", "warmup"})
    return CheckResult(name=spec.name, status=Status.FAIL if problems else Status.PASS,
                       detail="; ".join(problems) + f" ({summary})" if problems else summary,
                       data=data)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}ms"


def totals_check(results: list[RoundResult], round_checks: list[CheckResult],
                 not_run: list[str] | None = None) -> CheckResult:
    """Whole-matrix counts (warm-up requests are in none); passes only when every round
    passed its own expectations. Rounds past saturation are named, and so are the rounds the
    sweep did not run after one (`not_run`: Saturation.stop_sweep)."""
    requests = sum(r.spec.requests for r in results)
    completed = sum(r.completed for r in results)
    errors = sum(r.errors for r in results)
    saturated = [r.spec.name for r in results if r.saturated]
    detail = (f"{len(results)} rounds, {requests} requests, {completed} completed, {errors} "
              f"errors, {sum(r.prompt_tokens for r in results)} input / "
              f"{sum(r.completion_tokens for r in results)} output tokens")
    if saturated:
        detail += f"; past saturation: {', '.join(saturated)}"
    if not_run:
        detail += f"; not run past saturation: {', '.join(not_run)}"
    return CheckResult(
        name="matrix-totals",
        status=Status.PASS if round_checks and all(c.status is Status.PASS for c in round_checks)
        else Status.FAIL,
        detail=detail,
        data={"rounds": len(results), "requests": requests, "completed": completed,
              "errors": errors, "saturated": saturated, "not_run": list(not_run or [])})
