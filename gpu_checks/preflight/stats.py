"""Noise-aware verdicts: a robust statistic, its distribution-free interval, a 3-way rule.

Standard library only, no imagekit import and no relative import: the one copy, a module of the
GPU preflight package (gpu_checks/preflight, shipped as a ConfigMap and run with
`python -m preflight`), and what `imagekit.stats` re-exports for imagekit's own use
(tests/unit/test_stats.py::test_there_is_one_stats_module).

The statistic of a repeated measurement is the MEDIAN of its cycles (not the lowest: the lowest
of K cycles drifts down as K grows and hides a slow majority; the median does neither). Its
interval is the order-statistic (binomial) interval of the median: (x(k), x(n+1-k)) for the
largest k whose coverage 1 - 2 P(Bin(n, 1/2) < k) is still >= the confidence. It assumes only
independent cycles, no distribution. At confidence 0.9 it needs 5 samples ((min, max), 93.75 %);
fewer is DEFERRED with the reason, never a PASS.

Two distributions (a run against a previous one) are compared by the Hodges-Lehmann shift of
log(sample) (so a ratio of typical values) with its Mann-Whitney interval: the k-th smallest
and largest of the n*m pairwise log-ratios, k from the exact Mann-Whitney U distribution (normal
approximation above 10 000 pairs).

The 3-way rule against a bound: FAIL only when the whole interval is past the bound; PASS when
the whole interval is inside; NOISE (straddling: reported as PASS with a "within noise" note,
never blocking) otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

CONFIDENCE = 0.90
STATISTIC = "median of cycles"
INTERVAL = "order-statistic (binomial) interval of the median"
SHIFT_INTERVAL = "Hodges-Lehmann ratio with its Mann-Whitney interval"

Band = Literal["PASS", "NOISE", "FAIL", "DEFERRED"]


def check_repeats(value: Any, what: str = "--repeats") -> int:
    """An int >= 1, else ValueError naming `what` (callers turn it into one line, exit 2)."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(str(value), 10)
        except ValueError:
            raise ValueError(f"{what} must be a whole number >= 1, not {value!r}") from None
    if value < 1:
        raise ValueError(f"{what} must be >= 1, not {value}")
    return value


def check_confidence(value: Any, what: str = "--confidence") -> float:
    """A float strictly between 0 and 1, else ValueError naming `what`."""
    try:
        c = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number in (0, 1), not {value!r}") from None
    if not (0.0 < c < 1.0) or math.isnan(c):
        raise ValueError(f"{what} must be in (0, 1) exclusive, not {value}")
    return c


def median(xs: Iterable[float]) -> float:
    s = sorted(xs)
    if not s:
        raise ValueError("median of no samples")
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2.0


def _binom_cdf_half(k: int, n: int) -> float:
    """P(Bin(n, 1/2) <= k)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2.0 ** n


def median_rank(n: int, confidence: float) -> tuple[int, float] | None:
    """(k, coverage) of the widest-needed symmetric order-statistic interval (x(k), x(n+1-k))
    whose coverage is >= confidence, or None when even (min, max) covers less."""
    best = None
    for k in range(1, n // 2 + 1):
        coverage = 1.0 - 2.0 * _binom_cdf_half(k - 1, n)
        if coverage >= confidence:
            best = (k, coverage)
        else:
            break
    return best


def min_samples(confidence: float) -> int:
    """Fewest cycles whose (min, max) covers the median at `confidence`."""
    n = 1
    while median_rank(n, confidence) is None:
        n += 1
    return n


@dataclass(frozen=True)
class Summary:
    """A repeated measurement: every sample, the median, its interval and coverage."""

    samples: list[float]
    n: int
    statistic: float | None
    low: float | None
    high: float | None
    coverage: float | None
    confidence: float
    why: str | None = None  # set when there are too few samples for an interval

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(samples: Iterable[float], confidence: float = CONFIDENCE) -> Summary:
    xs = [float(x) for x in samples if x is not None and math.isfinite(float(x))]
    s = sorted(xs)
    n = len(s)
    stat = median(s) if s else None
    rank = median_rank(n, confidence) if n else None
    if rank is None:
        need = min_samples(confidence)
        return Summary(xs, n, stat, None, None, None, confidence,
                       why=f"{n} sample(s): an interval of the median at {confidence:.0%} "
                           f"confidence needs at least {need}")
    k, coverage = rank
    return Summary(xs, n, stat, s[k - 1], s[n - k], coverage, confidence)


@dataclass(frozen=True)
class Judged:
    """A summary against a bound: band PASS / NOISE / FAIL / DEFERRED, and a readable line."""

    band: Band
    bound: float
    better: Literal["lower", "higher"]
    summary: Summary
    text: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        """The check status: NOISE is a PASS (with the note in `text`); it never blocks."""
        return "PASS" if self.band == "NOISE" else self.band

    def as_dict(self) -> dict[str, Any]:
        out = {"band": self.band, "bound": self.bound, "better": self.better,
               "statistic_definition": STATISTIC, "interval_definition": INTERVAL}
        out.update(self.summary.as_dict())
        out.update(self.extra)
        return out


def fmt(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def judge(samples: Iterable[float] | Summary, bound: float, better: Literal["lower", "higher"],
          confidence: float = CONFIDENCE, unit: str = "") -> Judged:
    """The 3-way rule. better='lower': the value must be <= bound (a time ratio);
    better='higher': >= bound (a rate floor)."""
    s = samples if isinstance(samples, Summary) else summarize(samples, confidence)
    if s.low is None or s.high is None:
        return Judged("DEFERRED", bound, better, s, f"too few samples to judge: {s.why}")
    span = (f"median {fmt(s.statistic)}{unit} over {s.n} cycles, "
            f"{s.coverage:.0%} interval [{fmt(s.low)}, {fmt(s.high)}]{unit}")
    op = "<=" if better == "lower" else ">="
    if better == "lower":
        inside, past = s.high <= bound, s.low > bound
    else:
        inside, past = s.low >= bound, s.high < bound
    if past:
        return Judged("FAIL", bound, better, s, f"{span}: the whole interval misses "
                                                f"{op} {fmt(bound)}{unit}")
    if inside:
        return Judged("PASS", bound, better, s, f"{span} {op} {fmt(bound)}{unit}")
    return Judged("NOISE", bound, better, s, f"{span} straddles the bound {fmt(bound)}{unit}: "
                                             "within noise (not a FAIL)")


# ---------------------------------------------------------------- two distributions


def _mw_counts(n: int, m: int) -> list[int]:
    """Number of arrangements giving each Mann-Whitney U = 0..n*m (no ties): the coefficients
    of the Gaussian binomial [n+m choose n]_q."""
    # product over i=1..n of (1 - q^(m+i)) / (1 - q^i), as exact integer polynomials
    poly = [1]
    for i in range(1, n + 1):
        # multiply by (1 - q^(m+i))
        grown = poly + [0] * (m + i)
        for j, c in enumerate(poly):
            grown[j + m + i] -= c
        # divide by (1 - q^i): running sum with stride i
        for j in range(i, len(grown)):
            grown[j] += grown[j - i]
        poly = grown[: n * m + 1] if len(grown) > n * m + 1 else grown
    return poly[: n * m + 1]


def _mw_lower_k(n: int, m: int, confidence: float) -> int:
    """The largest k with P(U <= k - 1) <= (1 - confidence)/2 (0 when none: too few)."""
    alpha = (1.0 - confidence) / 2.0
    if n * m <= 10000:
        counts = _mw_counts(n, m)
        total = math.comb(n + m, n)
        cum, k = 0, 0
        for u, c in enumerate(counts):
            cum += c
            if cum / total <= alpha:
                k = u + 1
            else:
                break
        return k
    mu = n * m / 2.0
    sigma = math.sqrt(n * m * (n + m + 1) / 12.0)
    z = _norm_ppf(1.0 - alpha)
    return max(0, int(math.floor(mu - z * sigma)))


def _norm_ppf(p: float) -> float:
    """Inverse standard normal CDF (bisection on erf; plenty for interval widths)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Shift:
    """current / baseline as a ratio of typical values, with its interval."""

    ratio: float | None
    low: float | None
    high: float | None
    confidence: float
    n_baseline: int
    n_current: int
    baseline_median: float | None
    current_median: float | None
    why: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["definition"] = SHIFT_INTERVAL
        return out


def ratio_shift(baseline: Iterable[float], current: Iterable[float],
                confidence: float = CONFIDENCE) -> Shift:
    """Hodges-Lehmann estimate of current/baseline (median of all pairwise ratios) and its
    distribution-free Mann-Whitney interval. Samples must be > 0 (times, rates)."""
    a = [float(x) for x in baseline if x is not None and float(x) > 0 and math.isfinite(x)]
    b = [float(x) for x in current if x is not None and float(x) > 0 and math.isfinite(x)]
    med_a = median(a) if a else None
    med_b = median(b) if b else None
    if not a or not b:
        return Shift(None, None, None, confidence, len(a), len(b), med_a, med_b,
                     why=f"{len(a)} baseline and {len(b)} current sample(s)")
    logs = sorted(math.log(y) - math.log(x) for x in a for y in b)
    est = math.exp(median(logs))
    k = _mw_lower_k(len(a), len(b), confidence)
    if k < 1:
        return Shift(est, None, None, confidence, len(a), len(b), med_a, med_b,
                     why=f"{len(a)} baseline and {len(b)} current samples are too few for a "
                         f"{confidence:.0%} interval of the shift")
    return Shift(est, math.exp(logs[k - 1]), math.exp(logs[len(logs) - k]), confidence,
                 len(a), len(b), med_a, med_b)


def judge_shift(shift: Shift, bound: float, better: Literal["lower", "higher"] = "lower"
                ) -> tuple[Band, str]:
    """current/baseline against a ratio bound: for times (better='lower') a regression is the
    whole interval above `bound` (e.g. 1.2); for rates (better='higher') the whole interval
    below it (e.g. 0.8)."""
    if shift.low is None or shift.high is None:
        return "DEFERRED", f"too few samples to compare: {shift.why}"
    span = (f"{fmt(shift.ratio)}x the previous run ({shift.confidence:.0%} interval "
            f"[{fmt(shift.low)}, {fmt(shift.high)}], {shift.n_current} vs "
            f"{shift.n_baseline} samples)")
    if better == "lower":
        past, inside = shift.low > bound, shift.high <= bound
    else:
        past, inside = shift.high < bound, shift.low >= bound
    if past:
        return "FAIL", f"{span}: the whole interval is past {fmt(bound)}x"
    if inside:
        return "PASS", f"{span} within {fmt(bound)}x"
    return "NOISE", f"{span} straddles {fmt(bound)}x: within noise (not a regression)"


def _wilson(k: int, n: int, z: float) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def proportion_diff(k1: int, n1: int, k2: int, n2: int, confidence: float = CONFIDENCE
                    ) -> tuple[float, float, float]:
    """(p2 - p1, low, high): Newcombe's hybrid score interval of the difference of two shares
    (k2 of n2 now against k1 of n1 before); n1, n2 >= 1."""
    z = _norm_ppf(1.0 - (1.0 - confidence) / 2.0)
    p1, p2 = k1 / n1, k2 / n2
    l1, u1 = _wilson(k1, n1, z)
    l2, u2 = _wilson(k2, n2, z)
    d = p2 - p1
    low = d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2)
    high = d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2)
    return d, low, high


def goal_band(summary: Summary, goal: float, better: Literal["lower", "higher"]) -> str:
    """A bench goal: 'met' when the interval's worse end meets it, 'missed' when its better end
    misses it, 'within noise' otherwise; 'too few rounds' without an interval."""
    if summary.low is None or summary.high is None:
        return "too few rounds"
    worse, best = (summary.high, summary.low) if better == "lower" else \
        (summary.low, summary.high)
    ok = (lambda v: v <= goal) if better == "lower" else (lambda v: v >= goal)
    if ok(worse):
        return "met"
    if not ok(best):
        return "missed"
    return "within noise"


def judge_two(baseline: Iterable[float], current: Iterable[float], bound: float,
              better: Literal["lower", "higher"] = "lower", confidence: float = CONFIDENCE,
              what: str = "the reference") -> Judged:
    """current / baseline (both repeated, both noisy) against a ratio bound, on the
    Hodges-Lehmann ratio and its Mann-Whitney interval: the 3-way rule of `judge`. The summary's
    samples are each current sample over the baseline's median (for display); statistic, low
    and high are the shift's."""
    base = [float(x) for x in baseline]
    cur = [float(x) for x in current]
    shift = ratio_shift(base, cur, confidence)
    ref = shift.baseline_median
    shown = [x / ref for x in cur] if ref else []
    summary = Summary(shown, len(cur), shift.ratio, shift.low, shift.high, None, confidence,
                      why=shift.why)
    extra = {"baseline_samples": base, "current_samples": cur, "shift": shift.as_dict(),
             "statistic_definition": SHIFT_INTERVAL, "interval_definition": SHIFT_INTERVAL}
    if shift.low is None or shift.high is None:
        return Judged("DEFERRED", bound, better, summary,
                      f"too few samples to compare with {what}: {shift.why}", extra)
    span = (f"{fmt(shift.ratio)}x {what} ({confidence:.0%} interval [{fmt(shift.low)}, "
            f"{fmt(shift.high)}]x, {len(cur)} vs {len(base)} samples)")
    if better == "lower":
        past, inside = shift.low > bound, shift.high <= bound
    else:
        past, inside = shift.high < bound, shift.low >= bound
    op = "<=" if better == "lower" else ">="
    if past:
        return Judged("FAIL", bound, better, summary,
                      f"{span}: the whole interval misses {op} {fmt(bound)}x", extra)
    if inside:
        return Judged("PASS", bound, better, summary, f"{span} {op} {fmt(bound)}x", extra)
    return Judged("NOISE", bound, better, summary,
                  f"{span} straddles the bound {fmt(bound)}x: within noise (not a FAIL)", extra)
