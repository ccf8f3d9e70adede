"""The engine's own account of a load run, from its Prometheus `/metrics`: counters and
histograms scraped before and after the run, their deltas, and the interval a percentile of a
histogram delta must lie in. A load client's figures are held against it: the engine counted
every request and token itself and timed every one of them without the client's HTTP stack.

Hand-written, and small: the `prometheus_client` parser lives only in the engines' venvs, never in
imagekit's, and only the sample lines of the text format are needed here (comments, `# HELP` and
`# TYPE` lines are skipped; exemplars and OpenMetrics extensions are not read).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import httpx

Labels = frozenset[tuple[str, str]]

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)"
                     r"(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*(?P<key>[a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"(?P<value>(?:[^"\\]|\\.)*)"\s*'
                    r"(?:,|$)")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


class MetricsError(ValueError):
    """Text that is not the Prometheus exposition format, or a histogram that cannot be read."""


def _labels(text: str | None, line: str) -> Labels:
    if not text:
        return frozenset()
    pairs, at = [], 0
    while at < len(text):
        match = _LABEL.match(text, at)
        if match is None:
            raise MetricsError(f"unreadable labels in {line!r}")
        value = re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], match["value"])
        pairs.append((match["key"], value))
        at = match.end()
    return frozenset(pairs)


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts by upper bound (`le`, ascending, the last +Inf) and the exact
    sum of the observed values (the `_sum` sample)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float

    @property
    def count(self) -> int:
        return round(self.cumulative[-1]) if self.cumulative else 0

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def __sub__(self, before: Histogram) -> Histogram:
        if before.bounds != self.bounds:
            raise MetricsError(f"bucket bounds changed between scrapes: {before.bounds} -> "
                               f"{self.bounds}")
        return Histogram(self.bounds, tuple(a - b for a, b in zip(self.cumulative,
                                                                  before.cumulative, strict=True)),
                         self.total - before.total)

    def bucket_of(self, rank: int) -> tuple[float, float]:
        """(lower, upper] of the bucket holding the rank-th smallest value (1-based). Bucket
        lower bounds start at 0: the histograms read here hold durations."""
        if not 1 <= rank <= self.count:
            raise MetricsError(f"rank {rank} outside a histogram of {self.count} values")
        for i, cumulative in enumerate(self.cumulative):
            if cumulative >= rank:
                return (self.bounds[i - 1] if i else 0.0), self.bounds[i]
        raise AssertionError("unreachable: the +Inf bucket holds every value")

    def quantile_interval(self, q: float, foreign: int = 0) -> tuple[float, float]:
        """The interval that must hold the q-quantile, linearly interpolated between closest
        ranks (imagekit's `percentiles`, numpy's default, what vllm bench serve reports), of
        the values in this histogram that are ours, when `foreign` of them (at unknown values:
        a client's calibration requests) are not.

        Why it holds: let x be the histogram's sorted values and y ours (n - foreign of them).
        y_k's rank among x is between k and k + foreign, so x_k <= y_k <= x_(k+foreign). The
        interpolated quantile lies between y_floor and y_ceil of its position, hence between
        x_floor and x_(ceil+foreign), hence between the lower bound of x_floor's bucket and the
        upper bound of x_(ceil+foreign)'s."""
        ours = self.count - foreign
        if ours < 1 or not 0 <= q <= 1:
            raise MetricsError(f"no q={q} quantile of {ours} values ({self.count} counted, "
                               f"{foreign} foreign)")
        position = (ours - 1) * q
        low, _ = self.bucket_of(math.floor(position) + 1)
        _, high = self.bucket_of(math.ceil(position) + 1 + foreign)
        return low, high


@dataclass(frozen=True)
class Scrape:
    """One reading of `/metrics`: every sample by (name, labels)."""

    samples: dict[tuple[str, Labels], float]

    def total(self, name: str, **match: str) -> float:
        """The sum over every sample of `name` whose labels include `match` (a counter split
        by finish reason or engine index is one figure here)."""
        wanted = set(match.items())
        found = [v for (n, labels), v in self.samples.items() if n == name and wanted <= labels]
        if not found:
            raise MetricsError(f"no sample {name} {match or ''} in the scrape")
        return sum(found)

    def histogram(self, name: str, **match: str) -> Histogram:
        """The histogram `name` (its `_bucket`, `_sum` samples), summed over label sets."""
        wanted = set(match.items())
        by_bound: dict[float, float] = {}
        for (sample, labels), value in self.samples.items():
            if sample == f"{name}_bucket" and wanted <= labels:
                le = dict(labels).get("le")
                if le is None:
                    raise MetricsError(f"{name}_bucket without le")
                by_bound[float(le)] = by_bound.get(float(le), 0.0) + value
        if not by_bound or math.inf not in by_bound:
            raise MetricsError(f"no histogram {name} (with a +Inf bucket) in the scrape")
        bounds = tuple(sorted(by_bound))
        return Histogram(bounds, tuple(by_bound[b] for b in bounds),
                         self.total(f"{name}_sum", **match))


def parse(text: str) -> Scrape:
    samples: dict[tuple[str, Labels], float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise MetricsError(f"not a sample line: {line!r}")
        try:
            value = float(match["value"])
        except ValueError:
            raise MetricsError(f"not a sample value: {line!r}") from None
        samples[(match["name"], _labels(match["labels"], line))] = value
    return Scrape(samples)


def metrics_text(base_url: str) -> str:
    response = httpx.get(f"{base_url.rstrip('/')}/metrics", timeout=30)
    response.raise_for_status()
    return response.text


def scrape(base_url: str) -> Scrape:
    return parse(metrics_text(base_url))


@dataclass(frozen=True)
class Agreement:
    """A client's percentile against the interval the engine's histogram puts it in, widened
    by what the client's clock sees and the engine's does not (`below`, `above`)."""

    figure: str
    client: float
    interval: tuple[float, float]
    below: float = 0.0
    above: float = 0.0

    @property
    def ok(self) -> bool:
        low, high = self.interval
        return low - self.below <= self.client <= high + self.above

    def describe(self) -> str:
        low, high = self.interval
        verdict = "within" if self.ok else "OUTSIDE"
        return (f"{self.figure}: client {self.client * 1000:.1f} ms {verdict} the engine's "
                f"({low * 1000:g}, {high * 1000:g}] ms bucket interval, allowance "
                f"-{self.below * 1000:g}/+{self.above * 1000:g} ms")


def percentile_agrees(figure: str, client: float, engine: Histogram, q: float, *,
                      foreign: int = 0, below: float = 0.0, above: float = 0.0) -> Agreement:
    return Agreement(figure, client, engine.quantile_interval(q, foreign), below, above)


def count_disagreements(accounts: dict[str, dict[str, int]]) -> list[str]:
    """One line per figure on which the accounts (client, peer client, engine) differ, or
    which one of them lacks; none when every account gives every figure the same value."""
    figures = sorted({f for account in accounts.values() for f in account})
    out = []
    for figure in figures:
        values = {who: account.get(figure) for who, account in accounts.items()}
        if len(set(values.values())) > 1:
            out.append(f"{figure}: " + ", ".join(f"{who} {v}" for who, v in values.items()))
    return out
