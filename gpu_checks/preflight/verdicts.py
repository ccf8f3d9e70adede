"""Verdicts against references: busbw against a baseline record of the same GPU model, count
and topology; small-message times against nccl-tests' times of the same machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from . import stats
from .common import MODES, SCHEMA, check, human_bytes, timed_check

# ---------------------------------------------------------------------------- bandwidth verdict

BASELINE_MIN_BYTES = 64 * 1024**2
BASELINE_TOLERANCE = 0.10


def topology_signature(record: dict[str, Any]) -> str:
    """How the GPUs are linked, as a comparable string: 'single', or the sorted multiset of
    link kinds between GPU pairs from `nvidia-smi topo -m` ('NV18x6'), or 'unknown'."""
    if record.get("world_size") == 1:
        return "single"
    matrix = ((record.get("topology") or {}).get("matrix") or {})
    kinds: dict[str, int] = {}
    for a, row in (matrix.get("links") or {}).items():
        for b, link in row.items():
            if a.startswith("GPU") and b.startswith("GPU") and a < b:
                kinds[link] = kinds.get(link, 0) + 1
    if not kinds:
        return "unknown" if record.get("device_type") == "cuda" else "cpu"
    return ",".join(f"{k}x{v}" for k, v in sorted(kinds.items()))


def baseline_key(record: dict[str, Any]) -> tuple[str, int, str]:
    names = sorted({str(r.get("name")) for r in record.get("ranks", [])})
    return (" + ".join(names), int(record.get("world_size") or 0), topology_signature(record))


def find_baseline(key: tuple[str, int, str], path: Path | None
                  ) -> tuple[Path | None, dict[str, Any] | None, str]:
    """The baseline for `key`: `path` itself (a file), or in a folder the earliest PASS record
    of the same GPU model, count and topology (the first run of a kind is its baseline)."""
    if path is None:
        return None, None, "no baseline folder or file given"
    files = [path] if path.is_file() else sorted(path.glob("*.json")) if path.is_dir() else []
    if not files:
        return None, None, f"{path} holds no JSON records"
    found = []
    for f in files:
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(rec, dict) or rec.get("schema") != SCHEMA:
            continue
        if rec.get("status") != "PASS" or rec.get("test_hooks") or not rec.get("bandwidth"):
            continue
        if baseline_key(rec) == key:
            found.append((str(rec.get("started")), f, rec))
    if not found:
        return None, None, (f"no PASS record of {key[1]}x {key[0]} with topology {key[2]} in "
                            f"{path}")
    _, f, rec = min(found, key=lambda t: t[0])
    return f, rec, "earliest matching record"


def default_baselines() -> Path | None:
    """--baseline auto's folder: `samples/` beside the package (a mount may lay one out), else
    the checkout's gpu_checks/samples when the package runs from a checkout's gpu_checks."""
    here = Path(__file__).resolve().parent
    candidates = [here.parent / "samples"]
    if len(here.parents) > 2:
        candidates.append(here.parents[2] / "gpu_checks" / "samples")
    return next((c for c in candidates if c.is_dir()), None)


def bandwidth_verdict(record: dict[str, Any], baseline: dict[str, Any] | None,
                      source: str, tolerance: float = BASELINE_TOLERANCE,
                      min_bytes: int = BASELINE_MIN_BYTES,
                      confidence: float = stats.CONFIDENCE) -> dict[str, Any]:
    """busbw at every size >= min_bytes against the baseline's: FAIL naming the sizes that fall
    more than `tolerance` below it and each one's slowest rank; no baseline: DEFERRED."""
    key = baseline_key(record)
    if record.get("world_size", 1) == 1:
        return check("bandwidth-verdict", "DEFERRED",
                     "n=1: busbw is 0 by definition; there is no link to judge", key=list(key))
    if baseline is None:
        return check("bandwidth-verdict", "DEFERRED",
                     f"no baseline to judge busbw against: {source}; commit a PASS sample of "
                     f"this GPU model, count and topology in gpu_checks/samples/",
                     key=list(key))
    mine = {row["bytes"]: row for row in record["bandwidth"]["sizes"] if row["bytes"] >= min_bytes}
    base = {row["bytes"]: row for row in baseline["bandwidth"]["sizes"]
            if row["bytes"] >= min_bytes}
    common = sorted(set(mine) & set(base))
    if not common:
        return check("bandwidth-verdict", "DEFERRED",
                     f"no size >= {human_bytes(min_bytes)} measured in both this run and the "
                     f"baseline ({source})", key=list(key))
    rows, judged = [], []
    for size in common:
        ref_cycles = base[size].get("busbw_cycles_GBps") or [base[size]["busbw_GBps"]]
        ref = stats.median(ref_cycles)  # the baseline's typical busbw (median of its cycles)
        samples = [b / ref if ref else float("inf")
                   for b in (mine[size].get("busbw_cycles_GBps") or [mine[size]["busbw_GBps"]])]
        j = stats.judge(samples, 1.0 - tolerance, "higher", confidence)
        row = {"bytes": size, "busbw_GBps": mine[size]["busbw_GBps"],
               "baseline_busbw_GBps": ref, "ratio": j.summary.statistic,
               "slowest_rank": mine[size]["slowest_rank"], **j.as_dict()}
        rows.append(row)
        judged.append((f"{human_bytes(size)} (slowest rank {mine[size]['slowest_rank']}, "
                       f"{mine[size]['busbw_GBps']:.1f} vs {ref:.1f} GB/s)", j))
    data = {"key": list(key), "baseline": source, "tolerance": tolerance,
            "min_bytes": min_bytes, "sizes": rows}
    out = timed_check("bandwidth-verdict", judged, "size", **data)
    out["detail"] = (f"busbw / the baseline's ({source}) at {len(rows)} size(s) >= "
                     f"{human_bytes(min_bytes)} against {1 - tolerance:.2f}: " + out["detail"])
    return out


def small_message_verdict(ours: list[dict[str, Any]], theirs: dict[str, dict[int, dict[str,
                          float]]], source: str, world: int, at_bytes: int = 1024,
                          bound: float = 1.5, direct_why: str | None = None,
                          confidence: float = stats.CONFIDENCE
                          ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(check, comparison data): our ncclAllReduce times at `at_bytes` (ctypes on torch's own
    communicator, timed as nccl-tests does: host clock around the loop to the stream's end,
    eager and one CUDA graph replay) <= bound x nccl-tests' times of the same mode (eager vs
    default, graph vs -G), and the sums we timed exact. Event-pair times are data only. Judged:
    out of place always, in place at n >= 2 -- at n = 1 NCCL enqueues no work for an in-place
    all-reduce (both sides time an empty host call), so it is kept as data only.
    torch c10d's own times stay as context. No direct timing (gloo, no communicator pointer or
    libnccl): DEFERRED saying why."""
    mine = {row["bytes"]: row for row in ours}
    rows = []
    for b in sorted(mine):
        row: dict[str, Any] = {"bytes": b, "ours_eager_us": mine[b]["eager_us"],
                               "ours_graph_us": mine[b].get("graph_us"),
                               "ours_graph_empty": mine[b].get("graph_empty")}
        for m, t in (mine[b].get("nccl") or {}).items():
            row[f"ours_nccl_{m}_eager_us"] = t.get("eager_us")
            row[f"ours_nccl_{m}_graph_us"] = t.get("graph_us")
            row[f"ours_nccl_{m}_event_eager_us"] = t.get("event_eager_us")
            row[f"ours_nccl_{m}_event_graph_us"] = t.get("event_graph_us")
        for mode in ("eager", "graph"):
            t = theirs.get(mode, {}).get(b)
            if t:
                row[f"nccl_tests_{mode}_in_place_us"] = t["in_place_us"]
                row[f"nccl_tests_{mode}_out_of_place_us"] = t["out_of_place_us"]
        rows.append(row)
    data: dict[str, Any] = {"at_bytes": at_bytes, "bound": bound, "nccl_tests": source,
                            "sizes": rows, "judged": ["out_of_place"] +
                            (["in_place"] if world > 1 else [])}
    if not theirs.get("eager"):
        return check("small-message-time", "DEFERRED",
                     f"no nccl-tests (eager) output to compare with ({source})", **data), data
    base = theirs["eager"].get(at_bytes)
    if at_bytes not in mine or base is None:
        return check("small-message-time", "DEFERRED",
                     f"{human_bytes(at_bytes)} not measured by both ({source})", **data), data
    direct = mine[at_bytes].get("nccl")
    if not direct:
        return check("small-message-time", "DEFERRED",
                     "no nccl-tests-like timing (ncclAllReduce on the process group's "
                     f"communicator): {direct_why or 'not measured'}; torch c10d's times are "
                     "kept as context only", **data), data
    ratios: dict[str, float] = {}
    verdicts: list[tuple[str, Any]] = []
    cycles = mine[at_bytes].get("nccl_cycles") or [direct]
    parts, problems = [], []
    for m in MODES:
        t = direct.get(m) or {}
        judged = m in data["judged"]
        if judged and t.get("sums_ok") is False:
            problems.append(f"{m.replace('_', ' ')}: {t.get('sums')}")
        pair = []
        for mode, key in (("eager", "eager_us"), ("graph", "graph_us")):
            ref = theirs.get(mode, {}).get(at_bytes, {}).get(f"{m}_us")
            if t.get(key) is None or not ref or ref <= 0:
                if judged and mode == "eager":
                    problems.append(f"{m.replace('_', ' ')} eager not timed by both")
                continue
            ratio = t[key] / ref
            if judged:
                ours_cycles = [c[m][key] for c in cycles
                               if (c.get(m) or {}).get(key) is not None]
                theirs_cycles: Any = theirs.get(mode, {}).get(at_bytes, {}).get(
                    f"{m}_us_cycles") or [ref]
                j = stats.judge_two(theirs_cycles, ours_cycles, bound, "lower", confidence,
                                    f"nccl-tests ({mode})")
                verdicts.append((f"{m}_{mode}", j))
                ratios[f"{m}_{mode}"] = j.summary.statistic if j.summary.statistic is not None \
                    else ratio
            pair.append(f"{mode} {t[key]:.2f} vs {ref:.2f} us = {ratio:.2f}x")
        label = m.replace("_", " ") + ("" if judged else " (not judged)")
        parts.append(f"{label}: " + (", ".join(pair) or "-"))
    data["ratios"] = ratios
    data["ratio"] = max(ratios.values()) if ratios else None
    data["per_ratio"] = [dict(ratio=k, **j.as_dict()) for k, j in verdicts]
    head = (f"{human_bytes(at_bytes)} ncclAllReduce on torch's communicator vs nccl-tests, "
            f"both timed by the host clock around the loop to the stream's end: "
            + "; ".join(parts))
    if world == 1:
        head += ("; n=1: NCCL does no work for an in-place all-reduce on one rank (the graph "
                 "captures nothing, the result is the rank's own contribution), so in place "
                 "is not judged; out of place copies and is")
    if problems:
        return check("small-message-time", "FAIL", head + "; " + "; ".join(problems),
                     **data), data
    verdict_ = timed_check("small-message-time", verdicts, "ratio", **data)
    verdict_["detail"] = (f"{head}; sums exact; judged on our {len(cycles)} cycle(s) against "
                          f"nccl-tests' cycles (Hodges-Lehmann ratio, Mann-Whitney interval), "
                          f"bound {bound}x: {verdict_['detail']}")
    return verdict_, data
