"""The /metrics reader that holds a load client's figures against the engine's own: parsing,
histogram deltas, the interval a percentile must lie in (checked against the values themselves),
and the two ways the comparison fails: a client percentile outside the engine's bucket, and
counts that differ."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from imagekit.acceptance.load import percentiles

from .engine_metrics import (
    Histogram,
    MetricsError,
    count_disagreements,
    parse,
    percentile_agrees,
)

TTFT_BOUNDS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5)
MODEL = 'model_name="HuggingFaceTB/SmolLM2-135M-Instruct",engine="0"'


def exposition(values: list[float], successes: dict[str, int], prompt: int,
               name: str = "vllm:time_to_first_token_seconds") -> str:
    """What vLLM 0.32's /metrics (prometheus_client) writes for these observations."""
    lines = ["# HELP vllm:request_success_total Count of successfully processed requests.",
             "# TYPE vllm:request_success_total counter"]
    for reason, n in successes.items():
        lines.append(f'vllm:request_success_total{{{MODEL},finished_reason="{reason}"}} {n}.0')
        lines.append(f'vllm:request_success_created{{{MODEL},finished_reason="{reason}"}} '
                     "1.7e9")
    lines += ["# TYPE vllm:prompt_tokens_total counter",
              f"vllm:prompt_tokens_total{{{MODEL}}} {prompt}.0",
              f"# HELP {name} Histogram of time to first token in seconds.",
              f"# TYPE {name} histogram"]
    for bound in (*TTFT_BOUNDS, math.inf):
        le = "+Inf" if bound == math.inf else repr(bound)
        lines.append(f'{name}_bucket{{{MODEL},le="{le}"}} {sum(v <= bound for v in values)}.0')
    lines += [f"{name}_count{{{MODEL}}} {len(values)}.0",
              f"{name}_sum{{{MODEL}}} {sum(values)!r}",
              f"{name}_created{{{MODEL}}} 1.7e9"]
    return "\n".join(lines) + "\n"


def test_counters_are_summed_over_their_label_sets_and_created_is_not_a_count() -> None:
    scrape = parse(exposition([0.03], {"length": 5, "stop": 2, "abort": 0}, 640))
    assert scrape.total("vllm:request_success_total") == 7
    assert scrape.total("vllm:request_success_total", finished_reason="length") == 5
    assert scrape.total("vllm:prompt_tokens_total") == 640
    with pytest.raises(MetricsError, match="no sample vllm:generation_tokens_total"):
        scrape.total("vllm:generation_tokens_total")


def test_label_values_keep_escaped_quotes_commas_and_braces() -> None:
    scrape = parse('x_total{a="one, \\"two\\" {3}",b="back\\\\slash"} 4 1700000000000\n'
                   "y 1e3\n")
    assert scrape.total("x_total", a='one, "two" {3}', b="back\\slash") == 4
    assert scrape.total("y") == 1000


@pytest.mark.parametrize("text", ["vllm:x{a=\"1\" 2\n", "vllm:x{a=\"1\"} two\n",
                                  "just words\n"])
def test_text_that_is_not_the_exposition_format_is_refused(text: str) -> None:
    with pytest.raises(MetricsError):
        parse(text)


def test_histogram_delta_is_the_runs_own_observations() -> None:
    earlier = [0.002, 0.3, 0.9]
    run = [0.015, 0.018, 0.03, 0.05, 0.07]
    before = parse(exposition(earlier, {"length": 3}, 10)).histogram(
        "vllm:time_to_first_token_seconds")
    after = parse(exposition(earlier + run, {"length": 8}, 20)).histogram(
        "vllm:time_to_first_token_seconds")
    delta = after - before
    assert delta.count == 5 and delta.mean == pytest.approx(sum(run) / 5)
    assert delta.bounds[-1] == math.inf and delta.cumulative[3] == 2   # 2 values <= 20 ms
    assert delta.quantile_interval(0.5) == (0.02, 0.04)                # the median, 30 ms
    other = Histogram((0.1, math.inf), (1, 1), 0.05)
    with pytest.raises(MetricsError, match="bucket bounds changed"):
        after - other


def test_quantile_interval_holds_the_clients_percentile_with_foreign_values() -> None:
    """Against the values themselves: for random runs, the p50 and p90 of the run's own
    values (imagekit's percentiles) lie in the interval read from a histogram that also holds
    `foreign` values of any size (a client's calibration requests)."""
    rng = random.Random(7)
    for trial in range(400):
        ours = [rng.lognormvariate(-3, 1) for _ in range(rng.randint(1, 40))]
        foreign = [rng.choice([0.0005, 3.0, rng.random()]) for _ in range(trial % 3)]
        text = exposition(ours + foreign, {"length": 1}, 1)
        hist = parse(text).histogram("vllm:time_to_first_token_seconds")
        stats = percentiles(ours)
        for q, value in ((0.5, stats.p50), (0.9, stats.p90), (0.99, stats.p99)):
            low, high = hist.quantile_interval(q, foreign=len(foreign))
            assert value is not None and low <= value <= high, (trial, q, value, low, high)


def test_a_shifted_client_median_is_outside_the_engines_bucket() -> None:
    """The FAIL case: the engine's median is in (20, 40] ms; a client median of 35 ms agrees,
    one shifted by 60 ms does not, even with a 10 ms allowance for the client's HTTP."""
    values = [0.012, 0.018, 0.025, 0.03, 0.033, 0.038, 0.07, 0.09, 0.2]
    hist = parse(exposition(values, {"length": 9}, 1)).histogram(
        "vllm:time_to_first_token_seconds")
    near = percentile_agrees("TTFT p50", 0.035, hist, 0.5, above=0.010)
    far = percentile_agrees("TTFT p50", 0.035 + 0.060, hist, 0.5, above=0.010)
    below = percentile_agrees("TTFT p50", 0.004, hist, 0.5, above=0.010)
    assert near.ok and near.interval == (0.02, 0.04)
    assert not far.ok and "OUTSIDE the engine's (20, 40] ms" in far.describe()
    assert not below.ok                       # a client cannot see a request sooner than it
    assert percentile_agrees("TTFT p50", 0.045, hist, 0.5, above=0.010).ok


def test_foreign_values_widen_the_interval_only_as_far_as_they_can_move_the_rank() -> None:
    values = [0.015, 0.03, 0.05, 0.07, 0.09]
    hist = parse(exposition(values, {"length": 5}, 1)).histogram(
        "vllm:time_to_first_token_seconds")
    assert hist.quantile_interval(0.5) == (0.04, 0.06)                 # x_3 = 50 ms
    assert hist.quantile_interval(0.5, foreign=2) == (0.02, 0.08)      # ours: x_2 .. x_4
    with pytest.raises(MetricsError, match="no q=0.5 quantile of 0 values"):
        hist.quantile_interval(0.5, foreign=5)


def test_counts_that_differ_or_are_missing_are_named() -> None:
    same = {"completed": 32, "failed": 0, "input tokens": 4321, "output tokens": 1536}
    assert count_disagreements({"imagekit": same, "vllm bench serve": dict(same),
                                "engine /metrics": dict(same)}) == []
    off = dict(same, **{"output tokens": 1535})
    lacking = {k: v for k, v in same.items() if k != "failed"}
    problems = count_disagreements({"imagekit": same, "vllm bench serve": off,
                                    "engine /metrics": lacking})
    assert problems == [
        "failed: imagekit 0, vllm bench serve 0, engine /metrics None",
        "output tokens: imagekit 1536, vllm bench serve 1535, engine /metrics 1536"]


REAL = Path(__file__).parents[1] / "fixtures/engine-metrics/vllm-0.32.0-after-two-runs.txt"


def test_a_real_vllm_exposition_is_read_whole() -> None:
    """/metrics of vLLM 0.32 (prometheus_client's text) after the two runs of
    test_load_beside_vllm_real with vLLM's default buckets: 2 + 32 + 32 requests of 32 tokens
    (imagekit's two calibration requests took 1 each)."""
    scrape = parse(REAL.read_text())
    assert scrape.total("vllm:request_success_total") == 66
    assert scrape.total("vllm:request_success_total", finished_reason="length") == 66
    assert scrape.total("vllm:prompt_tokens_total") == 9254
    assert scrape.total("vllm:generation_tokens_total") == 2 + 64 * 32
    ttft = scrape.histogram("vllm:time_to_first_token_seconds",
                            model_name="HuggingFaceTB/SmolLM2-135M-Instruct")
    itl = scrape.histogram("vllm:inter_token_latency_seconds")
    assert ttft.bounds == (*TTFT_BOUNDS, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0,
                           2560.0, math.inf)
    assert ttft.count == 66 and itl.count == 64 * 31
    assert ttft.quantile_interval(0.5) == (1.0, 2.5)     # vLLM's default: 1.5 s wide here
    assert itl.quantile_interval(0.5) == (0.075, 0.1)
