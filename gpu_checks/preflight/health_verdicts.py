"""NVML health verdicts: every rank's snapshots before and after the run (health.py collects
them) judged as nvml-ecc, nvml-remapped-rows, nvml-retired-pages, nvml-clock-events, nvml-pcie,
nvml-nvlink and nvml-xid; what does not apply is N/A, what could not be read is DEFERRED."""

from __future__ import annotations

from typing import Any

from . import stats
from .common import check
from .health import (
    CLOCK_EVENT_FAIL,
    HARDWARE_XIDS,
    NVML_NVLINK_ERRORS,
    NVML_PERF_POLICY,
    reason_names,
)


def _delta(before: dict[str, Any], after: dict[str, Any], key: str) -> int | None:
    if isinstance(before.get(key), int) and isinstance(after.get(key), int):
        return after[key] - before[key]
    return None


def clock_windows(samples: list[dict[str, Any]], windows: int) -> list[dict[str, Any]]:
    """The load's NVML samples cut into `windows` consecutive equal parts (the clock check's
    cycles): per part the fraction of samples carrying a slowdown reason, and its SM clock."""
    n = len(samples)
    k = max(1, min(windows, n))
    out = []
    for w in range(k):
        part = samples[w * n // k:(w + 1) * n // k]
        slow = [s for s in part if int(s["clock_event_reasons"]) & CLOCK_EVENT_FAIL]
        clocks = [s["sm_clock_mhz"] for s in part if isinstance(s.get("sm_clock_mhz"), int)]
        mask = 0
        for s in slow:
            mask |= int(s["clock_event_reasons"]) & CLOCK_EVENT_FAIL
        out.append({"samples": len(part), "slowed_fraction": len(slow) / len(part) if part else 0,
                    "reasons": reason_names(mask),
                    "sm_clock_mhz_median": stats.median(clocks) if clocks else None})
    return out


def health_checks(per_rank: list[dict[str, Any]], world: int, repeats: int = 5,
                  confidence: float = stats.CONFIDENCE
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Judge every rank's NVML readings: (checks, not-applicable notes).

    Each rank's entry: {"rank", "available", "why", "before", "after", "load_samples",
    "xid_events", "xid_watch_error", "kernel_log": {"readable", "why", "xids"}, "window":
    [t0, t1]}. A check's data keeps every rank's counters; a notes entry says why a check does
    not apply here (retired pages on GPUs that remap rows; NVLink on one GPU)."""
    names = ("nvml-ecc", "nvml-remapped-rows", "nvml-clock-events", "nvml-pcie", "nvml-nvlink",
             "nvml-xid")
    missing = [r for r in per_rank if not r.get("available")]
    if missing:
        why = "; ".join(f"rank {r['rank']}: {r.get('why')}" for r in missing)
        return [check(n, "DEFERRED", f"no NVML reading: {why}",
                      ranks=[r["rank"] for r in missing]) for n in names], []
    checks: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []

    def verdict(name: str, problems: list[str], unread: list[str], ok: str, **data: Any) -> None:
        if problems:
            checks.append(check(name, "FAIL", "; ".join(problems), **data))
        elif unread:
            checks.append(check(name, "DEFERRED", "NVML could not read: " + "; ".join(unread),
                                **data))
        else:
            checks.append(check(name, "PASS", ok, **data))

    # ECC mode and uncorrectable counters
    problems, unread, data = [], [], {}
    for r in per_rank:
        a, errs = r["after"], r["after"].get("errors", {})
        data[str(r["rank"])] = {k: a.get(k) for k in a if k.startswith("ecc_")}
        mode = a.get("ecc_mode")
        if mode is None:
            unread.append(f"rank {r['rank']} ECC mode ({errs.get('ecc_mode')})")
        elif not mode["current"]:
            problems.append(f"rank {r['rank']}: ECC is disabled"
                            + (" (enabled after the next reset)" if mode["pending"] else ""))
        for scope in ("volatile", "aggregate"):
            value = a.get(f"ecc_uncorrected_{scope}")
            if value is None:
                unread.append(f"rank {r['rank']} {scope} uncorrectable "
                              f"({errs.get(f'ecc_uncorrected_{scope}')})")
            elif value:
                problems.append(f"rank {r['rank']}: {value} {scope} uncorrectable ECC error(s)")
    verdict("nvml-ecc", problems, unread,
            f"ECC enabled on all {len(per_rank)} GPU(s); 0 volatile and 0 aggregate "
            "uncorrectable errors", per_rank=data)

    # Remapped rows (Ampere and later) and retired pages (before Ampere)
    problems, unread, data = [], [], {}
    remap_ok = True
    for r in per_rank:
        a, errs = r["after"], r["after"].get("errors", {})
        rows = a.get("remapped_rows")
        data[str(r["rank"])] = {"remapped_rows": rows, "retired_pages": {
            k: a.get(k, errs.get(k)) for k in ("retired_pages_multiple_single_bit",
                                               "retired_pages_double_bit",
                                               "retired_pages_pending")}}
        if rows is None:
            remap_ok = False
            if a.get("retired_pages_pending") is None:
                unread.append(f"rank {r['rank']} remapped rows "
                              f"({errs.get('remapped_rows')}) and retired pages "
                              f"({errs.get('retired_pages_pending')})")
        else:
            if rows["pending"]:
                problems.append(f"rank {r['rank']}: a row remap is pending (the GPU needs a "
                                "reset before it is trusted)")
            if rows["failure"]:
                problems.append(f"rank {r['rank']}: row remapping FAILED (no spare rows left)")
        if a.get("retired_pages_pending"):
            problems.append(f"rank {r['rank']}: a page retirement is pending (reset needed)")
    rp_unsupported = [r["rank"] for r in per_rank
                      if r["after"].get("retired_pages_pending") is None]
    if rp_unsupported and remap_ok:
        err = per_rank[0]["after"].get("errors", {}).get("retired_pages_pending")
        notes.append({"name": "nvml-retired-pages", "status": "N/A",
                      "detail": f"retired pages not supported ({err}): these GPUs remap rows "
                                "instead (Ampere and later, e.g. Hopper); judged by "
                                "nvml-remapped-rows", "ranks": rp_unsupported})
    verdict("nvml-remapped-rows", problems, unread,
            f"no row remap pending and no remapping failure on {len(per_rank)} GPU(s) "
            f"(remapped rows: " + ", ".join(
                f"rank {r['rank']} {r['after']['remapped_rows']['correctable']} corr/"
                f"{r['after']['remapped_rows']['uncorrectable']} unc"
                for r in per_rank if r["after"].get("remapped_rows")) + ")"
            if remap_ok else "no retired page pending", per_rank=data)

    # Clock-event (throttle) reasons during the matmul: the load is cut into --repeats windows
    # (cycles); per window the fraction of samples slowed by a thermal/hardware reason. FAIL
    # only when the whole interval of that fraction is above 0 (slowed all through the load);
    # a transient reason in some windows is PASS "within noise", named.
    problems, unread, data = [], [], {}
    noisy: list[str] = []
    for r in per_rank:
        samples = [s for s in r.get("load_samples", []) if "clock_event_reasons" in s]
        mask = 0
        for s in samples:
            mask |= int(s["clock_event_reasons"])
        viol = (r.get("load") or {}).get("violation_ns") or {
            p: _delta(r["before"].get(f"violation_{p}") or {},
                      r["after"].get(f"violation_{p}") or {}, "violation_ns")
            for p in NVML_PERF_POLICY}
        clocks = [s["sm_clock_mhz"] for s in r.get("load_samples", []) if "sm_clock_mhz" in s]
        data[str(r["rank"])] = {"samples": len(samples), "reasons_mask": mask,
                                "reasons": reason_names(mask), "violation_ns_delta": viol,
                                "load": r.get("load"),
                                "sm_clock_mhz_min": min(clocks) if clocks else None,
                                "sm_clock_mhz_max": max(clocks) if clocks else None}
        windows = clock_windows(samples, repeats) if samples else []
        judged = stats.judge([w["slowed_fraction"] for w in windows], 0.0, "lower", confidence)
        data[str(r["rank"])].update(windows=windows, **{f"judged_{k}": v for k, v in
                                                        judged.as_dict().items()})
        if not samples:
            unread.append(f"rank {r['rank']} clock-event reasons under load")
        elif mask & CLOCK_EVENT_FAIL and judged.band == "DEFERRED":
            unread.append(f"rank {r['rank']} enough load samples to judge the clock "
                          f"({judged.text})")
        elif mask & CLOCK_EVENT_FAIL and judged.band == "FAIL":
            problems.append(f"rank {r['rank']}: clocks slowed during the matmul by "
                            f"{', '.join(reason_names(mask & CLOCK_EVENT_FAIL))} in every "
                            f"window ({judged.text})")
        elif mask & CLOCK_EVENT_FAIL:
            noisy.append(f"rank {r['rank']}: {', '.join(reason_names(mask & CLOCK_EVENT_FAIL))}"
                         f" in some windows, slowed fraction {judged.text}")
        if (viol.get("thermal") or 0) > 0:
            problems.append(f"rank {r['rank']}: thermal violation for "
                            f"{viol['thermal'] / 1e6:.1f} ms during the load")
    seen = sorted({n for d in data.values() for n in d["reasons"]})
    power = [f"rank {k} {d['violation_ns_delta']['power'] / 1e6:.0f} ms" for k, d in data.items()
             if (d["violation_ns_delta"].get("power") or 0) > 0]
    loads = [d["load"] for d in data.values() if d.get("load")]
    verdict("nvml-clock-events", problems, unread,
            ("no thermal or hardware slowdown during the matmul" if not noisy else
             "within noise, not slowed throughout the matmul: " + "; ".join(noisy))
            + (f" ({loads[0]['ops']} products in {loads[0]['seconds']} s)" if loads else "")
            + (f"; seen: {', '.join(seen)}" if seen else "; no clock-event reason seen")
            + (f"; at the power cap (sw_power_cap, not a fault under full load): "
               f"{', '.join(power)}" if power else ""),
            per_rank=data)

    # PCIe link generation/width under load; replay counter
    problems, unread, data = [], [], {}
    for r in per_rank:
        b, a = r["before"], r["after"]
        loads = r.get("load_samples", [])
        gen = max([s["pcie_gen"] for s in loads if "pcie_gen" in s] + [a.get("pcie_gen") or 0])
        width = max([s["pcie_width"] for s in loads if "pcie_width" in s]
                    + [a.get("pcie_width") or 0])
        replay = _delta(b, a, "pcie_replay_counter")
        data[str(r["rank"])] = {"gen_under_load": gen or None, "gen_max": a.get("pcie_gen_max"),
                                "gen_gpu_max": a.get("pcie_gen_gpu_max"),
                                "width_under_load": width or None,
                                "width_max": a.get("pcie_width_max"),
                                "replay_counter": a.get("pcie_replay_counter"),
                                "replay_delta": replay}
        if not gen or a.get("pcie_gen_max") is None:
            unread.append(f"rank {r['rank']} PCIe generation "
                          f"({a.get('errors', {}).get('pcie_gen_max')})")
        elif gen < a["pcie_gen_max"]:
            problems.append(f"rank {r['rank']}: PCIe link at gen {gen} under load, max "
                            f"{a['pcie_gen_max']}")
        if not width or a.get("pcie_width_max") is None:
            unread.append(f"rank {r['rank']} PCIe width "
                          f"({a.get('errors', {}).get('pcie_width_max')})")
        elif width < a["pcie_width_max"]:
            problems.append(f"rank {r['rank']}: PCIe link x{width}, max x{a['pcie_width_max']}")
        if replay is None:
            unread.append(f"rank {r['rank']} PCIe replay counter "
                          f"({a.get('errors', {}).get('pcie_replay_counter')})")
        elif replay > 0:
            problems.append(f"rank {r['rank']}: PCIe replay counter rose by {replay} during "
                            "the run (link errors)")
    verdict("nvml-pcie", problems, unread,
            "PCIe at max generation and width under load, replay counter unchanged ("
            + ", ".join(f"rank {k} gen{d['gen_under_load']} x{d['width_under_load']}, "
                        f"{d['replay_counter']} replays" for k, d in data.items()) + ")",
            per_rank=data)

    # NVLink: link state and error counters, where the GPU has links
    problems, data = [], {}
    any_active = False
    for r in per_rank:
        b, a = r["before"].get("nvlink", {}), r["after"].get("nvlink", {})
        active = [k for k, v in a.items() if v.get("active")]
        inactive = [k for k, v in a.items() if v.get("active") is False]
        any_active = any_active or bool(active)
        rises = {}
        for link in active:
            for name in NVML_NVLINK_ERRORS:
                d = _delta(b.get(link, {}), a.get(link, {}), name)
                if d:
                    rises[f"link{link}.{name}"] = d
        data[str(r["rank"])] = {"active": active, "inactive": inactive, "error_rises": rises,
                                "errors_total": {f"link{k}": {n: v.get(n) for n in
                                                              NVML_NVLINK_ERRORS}
                                                 for k, v in a.items() if v.get("active")}}
        if active and inactive:
            problems.append(f"rank {r['rank']}: NVLink(s) {', '.join(inactive)} down while "
                            f"{len(active)} are up")
        if rises:
            problems.append(f"rank {r['rank']}: NVLink error counters rose during the run: "
                            + ", ".join(f"{k} +{v}" for k, v in rises.items()))
    if not any_active and not problems:
        first = per_rank[0]["after"].get("nvlink", {}).get("0", {})
        notes.append({"name": "nvml-nvlink", "status": "N/A",
                      "detail": "no active NVLink on any GPU"
                                + (f" (NVML: {first['error']})" if "error" in first else "")
                                + (": one GPU, nothing to link" if world == 1 else
                                   "; the GPUs talk over PCIe"), "per_rank": data})
    else:
        verdict("nvml-nvlink", problems, [],
                "every NVLink up, no error counter rose ("
                + ", ".join(f"rank {k} {len(d['active'])} links" for k, d in data.items()) + ")",
                per_rank=data)

    # XID: NVML events during the run, and the kernel log when readable
    problems, unread, data = [], [], {}
    for r in per_rank:
        events = r.get("xid_events", [])
        log = r.get("kernel_log", {})
        t0, t1 = r.get("window", [None, None])
        during = [x for x in log.get("xids", []) if t0 is not None and x["t_monotonic"]
                  is not None and x["t_monotonic"] >= t0 - 1.0]
        earlier_hw = [x for x in log.get("xids", []) if x not in during
                      and x["xid"] in HARDWARE_XIDS]
        data[str(r["rank"])] = {"nvml_events": events, "nvml_watch_error":
                                r.get("xid_watch_error"), "kernel_log_readable":
                                log.get("readable"), "kernel_log_why": log.get("why"),
                                "kernel_log_xids": log.get("xids", [])}
        if events:
            problems.append(f"rank {r['rank']}: XID " + ", ".join(str(e["xid"]) for e in events)
                            + " reported by NVML during the run")
        if during:
            problems.append(f"rank {r['rank']}: kernel log XID "
                            + ", ".join(str(x["xid"]) for x in during) + " during the run")
        if earlier_hw:
            problems.append(f"rank {r['rank']}: hardware XID "
                            + ", ".join(str(x["xid"]) for x in earlier_hw)
                            + " in the kernel log since boot")
        if r.get("xid_watch_error") and not log.get("readable"):
            unread.append(f"rank {r['rank']} XID events ({r['xid_watch_error']}) and kernel "
                          f"log ({log.get('why')})")
    sources = []
    if any(not r.get("xid_watch_error") for r in per_rank):
        sources.append("NVML XID events watched during the run")
    if any(r.get("kernel_log", {}).get("readable") for r in per_rank):
        sources.append("kernel log read")
    else:
        sources.append("kernel log not readable (" + str(per_rank[0].get("kernel_log", {})
                                                         .get("why")) + ")")
    verdict("nvml-xid", problems, unread, "no XID: " + "; ".join(sources), per_rank=data)
    return checks, notes
