"""imagekit/stats.py: the median's order-statistic interval, the 3-way rule, the two-sample
ratio (Hodges-Lehmann with its Mann-Whitney interval), the bench's goal bands, bad input."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from imagekit import stats

REPO = Path(__file__).resolve().parents[2]


def test_there_is_one_stats_module() -> None:
    """The GPU preflight package carries the statistics into the Pod; imagekit.stats is that
    same module's names (no copy, no embedded source anywhere)."""
    from preflight import stats as one

    assert stats.judge is one.judge and stats.Summary is one.Summary
    assert stats._mw_lower_k is one._mw_lower_k
    defining = [p for p in [*REPO.glob("imagekit/**/*.py"), *REPO.glob("gpu_checks/**/*.py"),
                            *REPO.glob("probes/*.py")]
                if re.search(r"^def median_rank\(", p.read_text(), re.M)
                or "_STATS_SOURCE" in p.read_text()]
    assert defining == [Path(one.__file__)], defining


def test_stats_imports_nothing_of_imagekit() -> None:
    src = (REPO / "gpu_checks" / "preflight" / "stats.py").read_text()
    imports = re.findall(r"^(?:from|import) (\S+)", src, re.M)
    assert set(imports) <= {"__future__", "math", "collections.abc", "dataclasses", "typing"}, \
        imports


@pytest.mark.parametrize("n,k,coverage", [(5, 1, 0.9375), (8, 2, 0.9296875), (11, 3, None)])
def test_order_statistic_interval_of_the_median(n: int, k: int, coverage: float | None) -> None:
    rank = stats.median_rank(n, 0.9)
    assert rank is not None and rank[0] == k
    if coverage is not None:
        assert rank[1] == pytest.approx(coverage)
    assert stats.median_rank(4, 0.9) is None and stats.min_samples(0.9) == 5
    assert stats.min_samples(0.95) == 6


def test_the_interval_covers_the_median_as_often_as_it_says() -> None:
    """Coverage checked by simulation on skewed (lognormal) noise: >= the confidence."""
    rng = random.Random(7)
    true_median = 1.0  # lognormal(0, s) has median exp(0)
    hits = 0
    trials = 2000
    for _ in range(trials):
        s = stats.summarize([rng.lognormvariate(0, 0.3) for _ in range(9)], 0.9)
        hits += s.low <= true_median <= s.high
    assert hits / trials >= 0.9 - 0.02


def test_three_way_rule() -> None:
    assert stats.judge([1.0, 1.1, 1.2, 1.05, 1.15], 1.5, "lower").band == "PASS"
    assert stats.judge([1.6, 1.7, 1.8, 1.65, 1.75], 1.5, "lower").band == "FAIL"
    straddle = stats.judge([1.2, 1.4, 1.45, 1.6, 1.7], 1.5, "lower")
    assert straddle.band == "NOISE" and straddle.status == "PASS"
    assert "within noise" in straddle.text
    # a floor (higher is better)
    assert stats.judge([700, 710, 690, 720, 705], 632, "higher").band == "PASS"
    assert stats.judge([300, 310, 290, 320, 305], 632, "higher").band == "FAIL"
    few = stats.judge([9.0, 9.0], 1.5, "lower")
    assert few.band == few.status == "DEFERRED" and "needs at least 5" in few.text
    assert stats.judge([], 1.5, "lower").band == "DEFERRED"
    # one wild cycle of five cannot make a FAIL: the whole interval must be past the bound
    assert stats.judge([1.0, 1.0, 1.1, 1.0, 9.0], 1.5, "lower").band == "NOISE"


def test_mann_whitney_counts_and_critical_values() -> None:
    # U distribution for n = m = 2: 1,1,2,1,1 (6 arrangements); n = m = 5: 252
    assert stats._mw_counts(2, 2) == [1, 1, 2, 1, 1]
    assert sum(stats._mw_counts(5, 5)) == math.comb(10, 5)
    # tables: n = m = 5, two-sided 0.10 -> U_crit 4, so k = 5; n = m = 10 -> 27, k = 28
    assert stats._mw_lower_k(5, 5, 0.9) == 5
    assert stats._mw_lower_k(10, 10, 0.9) == 28
    assert stats._mw_lower_k(1, 3, 0.9) == 0  # too few for any interval
    # the normal approximation agrees with the exact count where both apply
    exact = stats._mw_lower_k(100, 100, 0.9)
    assert abs(exact - 4327) <= 3


def test_ratio_shift_finds_a_fifty_percent_slowdown() -> None:
    rng = random.Random(3)
    base = [rng.lognormvariate(0, 0.1) for _ in range(20)]
    same = [rng.lognormvariate(0, 0.1) for _ in range(20)]
    slow = [1.5 * rng.lognormvariate(0, 0.1) for _ in range(20)]
    s_same = stats.ratio_shift(base, same)
    assert s_same.low < 1.0 < s_same.high
    s_slow = stats.ratio_shift(base, slow)
    assert 1.35 < s_slow.low <= s_slow.ratio <= s_slow.high < 1.7
    assert stats.judge_shift(s_slow, 1.2)[0] == "FAIL"
    assert stats.judge_shift(s_same, 1.2)[0] == "PASS"
    assert stats.judge_shift(stats.ratio_shift([1.0], [1.0]), 1.2)[0] == "DEFERRED"
    # rates: lower is worse
    assert stats.judge_shift(stats.ratio_shift(slow, base), 0.8, "higher")[0] == "FAIL"


def test_goal_bands() -> None:
    faster = stats.summarize([0.5, 0.55, 0.6, 0.52, 0.58])  # a time ratio, goal <= 0.8
    assert stats.goal_band(faster, 0.8, "lower") == "met"
    assert stats.goal_band(stats.summarize([0.7, 0.9, 0.8, 0.75, 0.85]), 0.8,
                           "lower") == "within noise"
    assert stats.goal_band(stats.summarize([0.9, 0.95, 1.0, 0.92, 0.97]), 0.8,
                           "lower") == "missed"
    assert stats.goal_band(stats.summarize([2.0, 2.1, 1.9, 2.2, 2.05]), 1.5, "higher") == "met"
    assert stats.goal_band(stats.summarize([0.5, 0.6]), 0.8, "lower") == "too few rounds"


@pytest.mark.parametrize("value", [0, -1, "0", "x", 1.5, None])
def test_bad_repeats(value: object) -> None:
    with pytest.raises(ValueError, match="--repeats"):
        stats.check_repeats(value)


@pytest.mark.parametrize("value", [0, 1, -0.1, 1.5, "nan", "x", None])
def test_bad_confidence(value: object) -> None:
    with pytest.raises(ValueError, match=r"--confidence must be"):
        stats.check_confidence(value)


def test_good_repeats_and_confidence() -> None:
    assert stats.check_repeats("5") == 5 and stats.check_repeats(1) == 1
    assert stats.check_confidence("0.95") == 0.95
