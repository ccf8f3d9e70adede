"""Load regression against the previously ACCEPTED digest of the same image name.

The baseline is the newest ACCEPTED `bench` attempt (every check PASS; a first run's own
`regression` may be DEFERRED) whose context names the same image, and whose key is another
digest (a rerun of the same digest is not a baseline).

Distributions, not two numbers: per round of the same name, the per-request TTFT,
TPOT and E2E of this run against the baseline's, as the Hodges-Lehmann ratio (the median of all
pairwise ratios) with its Mann-Whitney interval (imagekit/stats.py). A regression is the whole
interval above 1 + `tolerance`; straddling it is "within noise" (named, not a FAIL). Goodput
(the share of requests meeting the SLOs): the Newcombe interval of the difference of the two
shares; a regression is the whole interval below -`tolerance`. Too few requests for an
interval: that metric is not judged (named); every metric not judged: DEFERRED. The p50/p99
pairs stay in the data as context. No baseline: DEFERRED, saying so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from imagekit import stats
from imagekit.acceptance.models import RoundSpec
from imagekit.evidence import AttemptRecord, EvidenceStore
from imagekit.results import CheckResult, Status

METRICS = (("ttft", "p50"), ("ttft", "p99"), ("tpot", "p50"), ("tpot", "p99"),
           ("e2e", "p50"), ("e2e", "p99"))


def accepted(record: AttemptRecord) -> bool:
    """Every check passed; a first run's `regression` is DEFERRED by nature (nothing to compare
    with) and does not keep it from being accepted, a regression FAIL does."""
    return bool(record.checks) and all(
        c.status is Status.PASS or (c.name == "regression" and c.status is Status.DEFERRED)
        for c in record.checks)


def baseline(store: EvidenceStore, image: str, subject: str) -> tuple[AttemptRecord, Path] | None:
    found = None
    for entry in store.index():
        if entry.get("kind") != "bench" or entry.get("key") == subject or \
                entry.get("status") in ("FAIL", "ERROR"):
            continue
        path = store.root / entry["path"]
        try:
            record = AttemptRecord.model_validate_json((path / "attempt.json").read_text())
        except (OSError, ValueError):
            continue
        if record.context.get("image") != image or not accepted(record):
            continue
        if found is None or record.finished > found[0].finished:
            found = (record, path)
    return found


def _rounds(path: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for file in sorted((path / "rounds").glob("*-result.json")):
        data = json.loads(file.read_text())
        out[RoundSpec.model_validate(data["spec"]).name] = data
    return out


def _samples(result: dict[str, Any], metric: str) -> list[float]:
    key = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}[metric]
    return [r[key] for r in result.get("records") or []
            if r.get(key) is not None and not r.get("error") and r[key] > 0]


def _good(result: dict[str, Any]) -> tuple[int, int] | None:
    met = [r.get("slo_met") for r in result.get("records") or []]
    if result.get("goodput") is None or not met or any(m is None for m in met):
        return None
    return sum(bool(m) for m in met), len(met)


def compare(current: dict[str, dict[str, Any]], previous: dict[str, dict[str, Any]],
            tolerance: float, confidence: float = stats.CONFIDENCE
            ) -> tuple[list[str], list[dict]]:
    """(problems, rows): per common round, each metric's distribution judged (module doc)."""
    problems, rows = [], []
    for name, now in current.items():
        before = previous.get(name)
        if before is None:
            continue
        row: dict[str, Any] = {"round": name, "verdicts": {}, "within_noise": [],
                               "not_judged": []}
        good_now, good_before = _good(now), _good(before)
        if now.get("goodput") is not None and before.get("goodput") is not None:
            row["goodput"] = [before["goodput"], now["goodput"]]
        if good_now and good_before:
            diff, lo, hi = stats.proportion_diff(good_before[0], good_before[1], good_now[0],
                                                 good_now[1], confidence)
            band = "FAIL" if hi < -tolerance else "PASS" if lo >= -tolerance else "NOISE"
            row["verdicts"]["goodput"] = {"band": band, "difference": diff, "low": lo,
                                          "high": hi, "bound": -tolerance,
                                          "definition": "Newcombe interval of the difference "
                                                        "of two shares"}
            if band == "FAIL":
                problems.append(f"{name}: goodput {before['goodput']:.0%} -> "
                                f"{now['goodput']:.0%} ({confidence:.0%} interval of the "
                                f"change [{lo:+.0%}, {hi:+.0%}], below -{tolerance:.0%})")
            elif band == "NOISE":
                row["within_noise"].append("goodput")
        for metric in ("ttft", "tpot", "e2e"):
            for pct in ("p50", "p99"):
                a = (before.get(metric) or {}).get(pct)
                b = (now.get(metric) or {}).get(pct)
                if a is not None and b is not None:
                    row[f"{metric}_{pct}"] = [a, b]
            base, cur = _samples(before, metric), _samples(now, metric)
            if not base and not cur:
                continue
            judged = stats.judge_two(base, cur, 1.0 + tolerance, "lower", confidence,
                                     "the baseline")
            row["verdicts"][metric] = dict(judged.as_dict(), text=judged.text)
            if judged.band == "FAIL":
                a = (before.get(metric) or {}).get("p50")
                b = (now.get(metric) or {}).get("p50")
                p50 = (f" (p50 {a * 1000:.1f}ms -> {b * 1000:.1f}ms)"
                       if a is not None and b is not None else "")
                problems.append(f"{name}: {metric.upper()} {judged.text}{p50}")
            elif judged.band == "NOISE":
                row["within_noise"].append(metric)
            elif judged.band == "DEFERRED":
                row["not_judged"].append(f"{metric} ({judged.text})")
        rows.append(row)
    return problems, rows


def regression_check(store: EvidenceStore, image: str, subject: str, attempt_path: Path,
                     tolerance: float, confidence: float = stats.CONFIDENCE) -> CheckResult:
    found = baseline(store, image, subject)
    if found is None:
        return CheckResult(name="regression", status=Status.DEFERRED,
                           detail=f"no previously accepted digest of image {image} to compare "
                                  "with (first accepted run)")
    record, path = found
    problems, rows = compare(_rounds(attempt_path), _rounds(path), tolerance, confidence)
    data = {"baseline": record.key, "baseline_attempt": record.attempt_id,
            "tolerance": tolerance, "confidence": confidence, "rounds": rows,
            "method": "per-request distributions: Hodges-Lehmann ratio with its Mann-Whitney "
                      "interval (TTFT, TPOT, E2E); Newcombe interval (goodput)"}
    if not rows:
        return CheckResult(name="regression", status=Status.DEFERRED, data=data,
                           detail=f"baseline {record.key} has no round of the same name")
    what = (f"against {record.key} (previously accepted {image}), tolerance {tolerance:.0%}: "
            f"{len(rows)} rounds compared as distributions")
    noise = [f"{r['round']} {m}" for r in rows for m in r["within_noise"]]
    unjudged = [f"{r['round']} {m}" for r in rows for m in r["not_judged"]]
    notes = ((f"; within noise (not a regression): {', '.join(noise)}" if noise else "")
             + (f"; not judged: {', '.join(unjudged)}" if unjudged else ""))
    if problems:
        return CheckResult(name="regression", status=Status.FAIL, data=data,
                           detail=(f"regressed {what}; " + "; ".join(problems))[:900])
    if not any(r["verdicts"] for r in rows) or all(
            all(v.get("band") == "DEFERRED" for v in r["verdicts"].values()) for r in rows):
        return CheckResult(name="regression", status=Status.DEFERRED, data=data,
                           detail=f"too few requests to compare {what}{notes}"[:900])
    return CheckResult(name="regression", status=Status.PASS, data=data,
                       detail=(f"no regression {what} (goodput, TTFT, TPOT, E2E){notes}")[:900])
