"""Load regression against the previously ACCEPTED digest of the same image name.

The baseline is the newest ACCEPTED `bench` attempt (every check PASS; a first run's own
`regression` may be DEFERRED) whose context names the same image, and whose key is another digest (a rerun of the same digest is not a baseline). Per round
of the same name: goodput may drop by `tolerance` (absolute share), TTFT, TPOT and E2E p50/p99
may grow by `tolerance` (relative). No baseline: DEFERRED, saying so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
        spec = data["spec"]
        load = f"r{spec['rate']:g}" if spec.get("rate") else f"c{spec['concurrency']}"
        name = (f"round-{spec['index']:02d}-{spec['modality']}-{load}-in{spec['input_tokens']}"
                f"-out{spec['output_tokens']}")
        out[name] = data
    return out


def compare(current: dict[str, dict[str, Any]], previous: dict[str, dict[str, Any]],
            tolerance: float) -> tuple[list[str], list[dict]]:
    problems, rows = [], []
    for name, now in current.items():
        before = previous.get(name)
        if before is None:
            continue
        row: dict[str, Any] = {"round": name}
        g_now, g_before = now.get("goodput"), before.get("goodput")
        if g_now is not None and g_before is not None:
            row["goodput"] = [g_before, g_now]
            if g_now < g_before - tolerance:
                problems.append(f"{name}: goodput {g_before:.0%} -> {g_now:.0%}")
        for metric, pct in METRICS:
            a = (before.get(metric) or {}).get(pct)
            b = (now.get(metric) or {}).get(pct)
            if a is None or b is None:
                continue
            row[f"{metric}_{pct}"] = [a, b]
            if a > 0 and b > a * (1 + tolerance):
                problems.append(f"{name}: {metric.upper()} {pct} {a * 1000:.1f}ms -> "
                                f"{b * 1000:.1f}ms (+{(b / a - 1):.0%})")
        rows.append(row)
    return problems, rows


def regression_check(store: EvidenceStore, image: str, subject: str, attempt_path: Path,
                     tolerance: float) -> CheckResult:
    found = baseline(store, image, subject)
    if found is None:
        return CheckResult(name="regression", status=Status.DEFERRED,
                           detail=f"no previously accepted digest of image {image} to compare "
                                  "with (first accepted run)")
    record, path = found
    problems, rows = compare(_rounds(attempt_path), _rounds(path), tolerance)
    data = {"baseline": record.key, "baseline_attempt": record.attempt_id,
            "tolerance": tolerance, "rounds": rows}
    if not rows:
        return CheckResult(name="regression", status=Status.DEFERRED, data=data,
                           detail=f"baseline {record.key} has no round of the same name")
    what = (f"against {record.key} (previously accepted {image}), tolerance {tolerance:.0%}: "
            f"{len(rows)} rounds compared")
    if problems:
        return CheckResult(name="regression", status=Status.FAIL, data=data,
                           detail=f"regressed {what}; " + "; ".join(problems)[:500])
    return CheckResult(name="regression", status=Status.PASS, data=data,
                       detail=f"no regression {what} (goodput, TTFT/TPOT/E2E p50 and p99)")
