"""Records of acceptance runs: one HTTP exchange, one load round, one matrix.

Exchanges keep the request body and the response (failed ones too) because the record's lesson
is that a verdict without the raw request cannot be re-judged later. Headers are never kept:
that is where an API key travels.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class Usage(BaseModel):
    """Token counts as the server reported them (OpenAI `usage`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    reasoning_tokens: int | None = None

    @classmethod
    def parse(cls, raw: Any) -> Usage | None:
        if not isinstance(raw, dict):
            return None
        details = raw.get("completion_tokens_details") or {}
        return cls(prompt_tokens=_int(raw.get("prompt_tokens")),
                   completion_tokens=_int(raw.get("completion_tokens")),
                   total_tokens=_int(raw.get("total_tokens")),
                   reasoning_tokens=_int(details.get("reasoning_tokens"))
                   if isinstance(details, dict) else None)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    name: str
    arguments: str


class Exchange(BaseModel):
    """One request and what came back. `status_code` is None when no HTTP answer arrived
    (refused, dropped, timed out); `error` then says what happened."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    method: str = "POST"
    path: str = "/v1/chat/completions"
    request: dict[str, Any] | None = None
    status_code: int | None = None
    response: Any = None
    error: str | None = None
    latency_s: float = 0.0
    stream: bool = False
    ttft_s: float | None = None
    chunks: int = 0
    done_marker: bool = False
    finish_reason: str | None = None
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = []
    usage: Usage | None = None
    #: a reset keep-alive connection before any answer, retried once on a fresh one
    connection_retry: str | None = None

    @property
    def ok(self) -> bool:
        return self.status_code == 200 and self.error is None

    @property
    def answer(self) -> str:
        """The visible answer: content without an inline `<think>…</think>` block."""
        return strip_thinking(self.content)

    def summary(self) -> str:
        if self.status_code is None:
            return f"no HTTP answer ({self.error})"
        if self.status_code == 200 and self.error:
            return f"HTTP 200, then {self.error}"
        if not self.ok:
            return f"HTTP {self.status_code}: {_short(self.response)}"
        return f"HTTP 200 in {self.latency_s:.2f}s: {self.answer.strip()[:80]!r}"


def strip_thinking(text: str) -> str:
    """Models whose reasoning parser is off put reasoning inline; the answer is what follows."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return text


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else repr(value)
    return " ".join(text.split())[:limit]


class Sample(BaseModel):
    """One judged answer: correctness, output tokens and latency listed together."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    case: str
    expected: str
    answer: str
    correct: bool
    status_code: int | None
    output_tokens: int | None
    latency_s: float
    note: str = ""


class LatencyStats(BaseModel):
    """Percentiles in seconds over one round; None when nothing was measured. p50/p90/p99 are
    always there (reports and the regression read them); `percentiles` holds the ones the
    matrix asked for (`percentiles = [50, 99.9]` gives keys "p50", "p99.9")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    count: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None
    percentiles: dict[str, float] = {}


Modality = Literal["text", "image", "video"]


class Slo(BaseModel):
    """Service-level objectives of one round (as in vLLM `bench serve --goodput`, GuideLLM,
    AIPerf): a request is *good* when it succeeded and met every threshold given; goodput is
    the share of the round's requests that were good, and must reach `goodput_floor`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttft_ms: float | None = Field(None, gt=0)
    tpot_ms: float | None = Field(None, gt=0)
    e2e_ms: float | None = Field(None, gt=0)
    goodput_floor: float = Field(0.9, ge=0, le=1)

    def met(self, ttft_s: float | None, tpot_s: float | None, e2e_s: float) -> bool:
        def within(value: float | None, limit_ms: float | None) -> bool:
            return limit_ms is None or (value is not None and value * 1000 <= limit_ms)
        return within(ttft_s, self.ttft_ms) and within(tpot_s, self.tpot_ms) and \
            within(e2e_s, self.e2e_ms)

    def describe(self) -> str:
        parts = [f"{k.removesuffix('_ms').upper()} <= {v:g}ms"
                 for k, v in (("ttft_ms", self.ttft_ms), ("tpot_ms", self.tpot_ms),
                              ("e2e_ms", self.e2e_ms)) if v is not None]
        return " and ".join(parts) or "no thresholds"


DatasetFormat = Literal["jsonl", "sharegpt", "trace"]


class Dataset(BaseModel):
    """Prompts from a file instead of sized random words, replayed in file order.

    `jsonl`: one JSON object a line, the prompt in `column`, optionally `max_tokens` in
    `output_column`. `sharegpt`: a JSON list (or JSON lines) of `{"conversations": [{"from":
    "human", "value": ...}, {"from": "gpt", ...}]}` (or OpenAI-style `messages` with role and
    content): the first human turn is the prompt and the reply's length sets `max_tokens` when
    the block gives no `output_tokens`; with `multi_turn` every human turn is sent, in order,
    each carrying the conversation so far with the model's own answers. `trace`: JSON lines
    of `{"timestamp": ms, "input_length": n, "output_length": n}` (the Mooncake trace AIPerf
    replays), each request sent at its timestamp (counted from the first row's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(min_length=1)
    format: DatasetFormat = "jsonl"
    column: str = Field("prompt", min_length=1)
    output_column: str | None = None
    multi_turn: bool = False
    #: the file's digest; given in the matrix, a file with another digest is refused
    sha256: str | None = Field(None, pattern=r"^[0-9a-f]{64}$")

    @property
    def label(self) -> str:
        stem = Path(self.path).name.split(".")[0] or "data"
        return f"{self.format}.{re.sub(r'[^A-Za-z0-9_-]+', '_', stem)[:40]}"


class Saturation(BaseModel):
    """When an open-loop round (a `rate` or a trace) counts as past the server's saturation:
    the server finished requests slower than they were sent, or requests queued longer and
    longer across the round. Such a round is marked `saturated` with the reason and its
    goodput is not judged: past saturation the latencies measure the queue, not the server
    (GuideLLM stops its sweep there for the same reason)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: saturated when the completion rate falls below (1 - this) x the offered send rate
    rate_shortfall: float = Field(0.10, gt=0, lt=1)
    #: saturated when the median TTFTs of the round's thirds of requests (by send time) rise
    #: third by third and the last is at least this many times the first …
    ttft_growth: float = Field(2.0, gt=1)
    #: … and larger by at least this many milliseconds (noise on a fast server is no queue)
    ttft_growth_min_ms: float = Field(50.0, ge=0)
    #: after a saturated round, rounds of the same shape at the same or a higher rate are
    #: not run (each would measure a longer queue), as GuideLLM ends its sweep there
    stop_sweep: bool = True

    def shape_of(self, spec: RoundSpec) -> tuple[object, ...]:
        """What a sweep varies apart from the rate: rounds alike in this are one sweep."""
        return (spec.modality, spec.input_tokens, spec.output_tokens, spec.concurrency,
                spec.burstiness, spec.dataset.model_dump_json() if spec.dataset else None)


class RoundSpec(BaseModel):
    """One load round: `requests` streaming requests kept `concurrency` in flight (closed
    loop), or, with `rate`, sent open-loop at arrivals of `rate` requests/s (Poisson, or gamma
    with `burstiness` != 1) whatever is still in flight, or at a trace's timestamps.
    `input_tokens` / `output_tokens` are None where the dataset gives them per request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    concurrency: int = Field(ge=1)
    input_tokens: int | None = Field(ge=1)
    output_tokens: int | None = Field(ge=1)
    modality: Modality = "text"
    requests: int = Field(ge=1)
    rate: float | None = Field(None, gt=0)
    slo: Slo | None = None
    #: gamma shape of the inter-arrival times (vLLM `--burstiness`): 1 is Poisson, below 1
    #: burstier, above 1 more even
    burstiness: float = Field(1.0, gt=0)
    #: seeds the arrivals and the random prompts (with the round's index)
    seed: int = 0
    #: requests sent before the round's clock starts, recorded apart and never counted
    warmup_requests: int = Field(0, ge=0)
    #: percentiles reported besides p50/p90/p99 (LatencyStats.percentiles)
    percentiles: list[float] = []
    dataset: Dataset | None = None
    #: the saturation rule (open-loop rounds only)
    saturation: Saturation | None = None

    @property
    def name(self) -> str:
        if self.dataset is not None and self.dataset.format == "trace":
            load = "trace"
        else:
            load = f"r{self.rate:g}" if self.rate else f"c{self.concurrency}"
        if self.rate and self.burstiness != 1:
            load += f"b{self.burstiness:g}"
        sizes = (f"-{self.dataset.label}" if self.dataset is not None
                 else f"-in{self.input_tokens}")
        if self.output_tokens is not None:
            sizes += f"-out{self.output_tokens}"
        return f"round-{self.index:02d}-{self.modality}-{load}{sizes}"


class RequestRecord(BaseModel):
    """One load request, kept compactly (the body is kept once per round, failures in full)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    i: int
    status_code: int | None
    error: str | None = None
    ttft_s: float | None = None
    e2e_s: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    chunks: int = 0
    finish_reason: str | None = None
    #: time per output token after the first: (E2E - TTFT) / (completion_tokens - 1)
    tpot_s: float | None = None
    slo_met: bool | None = None
    #: when it was sent, seconds from the round's start (warm-up: from the warm-up's start)
    sent_at_s: float | None = None
    #: the gaps between this request's content chunks, in milliseconds (µs resolution)
    itl_ms: list[float] = []
    #: multi-turn rounds: which conversation (in dataset order) and which turn of it
    conversation: int | None = None
    turn: int | None = None
    #: where the dataset sets them per request: the input length aimed at, the max_tokens sent
    input_target: int | None = None
    max_tokens: int | None = None


class TimingDefinitions(BaseModel):
    """What each timing figure of a round measures, carried beside the figures: load tools
    name different moments "TTFT" or "E2E" (vllm bench serve's TTFT ends at the empty role
    chunk, its E2E at the last token chunk), so a figure without its definition cannot be
    compared. docs/design/load-timing.md maps these to vllm bench serve's saved result."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clock: str = ("the client's monotonic clock (time.perf_counter), seconds; a request "
                  "starts when its bytes are handed to the connection (a wait inside the "
                  "client for a connection or behind other requests being sent does not "
                  "count)")
    ttft: str = ("start to the socket read that completed the first event carrying content "
                 "or reasoning (a role-only or empty first chunk does not count); stamped "
                 "when the bytes came in (stamps), before the event is parsed")
    itl: str = ("gaps between consecutive events carrying content or reasoning, every "
                "request's gaps pooled; an event of several tokens is one gap")
    tpot: str = ("(e2e - ttft) / (completion_tokens - 1), completion_tokens from the "
                 "server's usage; none for fewer than 2 tokens")
    e2e: str = ("start to the socket read that completed the answer's last event, data: "
                "[DONE] (without one: when the answer ended)")
    percentiles: str = "linear interpolation between the two nearest ranks (numpy's default)"
    requests_per_s: str = ("completed requests / duration; duration from the round's first "
                           "send to its last request's end")
    #: what gave each read its time: the kernel's receive stamp (a busy event loop's lag does
    #: not count) or, where the platform has none, the moment the event loop read the bytes
    stamps: str = "event loop read time (perf_counter)"


class RoundResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: RoundSpec
    duration_s: float
    completed: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    requests_per_s: float
    output_tokens_per_s: float
    ttft: LatencyStats
    itl: LatencyStats
    e2e: LatencyStats
    tpot: LatencyStats = LatencyStats()
    arrival: Literal["closed", "poisson", "gamma", "trace"] = "closed"
    goodput: float | None = None
    records: list[RequestRecord]
    #: the warm-up requests, sent before the round's clock: in no figure, count or check
    warmup: list[RequestRecord] = []
    #: open loop: requests per second as scheduled (from the first send to the last) and as
    #: the server finished them (from the first completion to the last)
    offered_requests_per_s: float | None = None
    completed_requests_per_s: float | None = None
    #: past saturation (Saturation): goodput is not judged; `saturation_reason` says why
    saturated: bool = False
    saturation_reason: str | None = None
    #: what ttft, itl, tpot, e2e and requests_per_s measure; None in rounds recorded before
    #: definitions were kept (that client started the clock before the HTTP stack got the
    #: request and stamped chunks when their stream's task ran)
    definitions: TimingDefinitions | None = None
    #: the client's own delay, from the kernel's receipt of bytes to the event loop's read
    #: (one sample per read; kernel stamps only, else None). Events of one stream that came
    #: closer together than this lag share a read and its time: an ITL tail or TTFT beyond
    #: the truth by about one gap, with a read lag above the gap, is the client's, not the
    #: server's
    read_lag: LatencyStats | None = None
    #: the client fell behind its own reads: read_lag p99 at or above the median ITL, so at
    #: least 1 % of reads came a whole gap late and their events share a stamp; the TTFT and
    #: ITL tails then carry the client's delay (`client_bound_reason` gives the figures)
    client_bound: bool = False
    client_bound_reason: str | None = None
    #: content events stamped with the same time as the one before in their stream (an ITL
    #: of 0): they came in one read, because the server flushed them together or because the
    #: client read after both had come; either way the earlier one's time is not its own
    shared_reads: int = 0
