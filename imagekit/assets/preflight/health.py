"""NVML health (nvidia-ml-py, optional): ECC, remapped rows, clock-event reasons under load,
PCIe link, NVLink errors, XID events and the kernel log's NVRM lines."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import time
from typing import Any

from . import stats
from .common import check
from .devices import pci_sysfs_name
from .state import Base

# ---------------------------------------------------------------------------- NVML health
#
# Why: DCGM-style health facts that a correct matmul and all-reduce do not show yet — ECC off or
# uncorrectable errors already counted, rows awaiting remap (the GPU needs a reset), clocks held
# down by heat or power, a PCIe link trained below its generation or width, link replays, NVLink
# errors, XID events. nvidia-ml-py is optional: without it each health check is DEFERRED saying
# so. Constants are NVML's ABI values (nvml.h), so a fake module in tests needs only functions.

NVML_VOLATILE, NVML_AGGREGATE, NVML_UNCORRECTED, NVML_CORRECTED = 0, 1, 1, 0
NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_TIMEOUT = 3, 10
NVML_XID_CRITICAL = 0x8
NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0
NVML_PERF_POLICY = {"power": 0, "thermal": 1}
NVML_NVLINK_MAX_LINKS = 18
NVML_NVLINK_ERRORS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
CLOCK_EVENT_REASONS = {  # nvmlClocksEventReason* bits
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap",
    0x8: "hw_slowdown", 0x10: "sync_boost", 0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}
#: Reasons that mean the GPU is slowed by heat or a hardware power/slowdown signal: FAIL.
CLOCK_EVENT_FAIL = 0x8 | 0x20 | 0x40 | 0x80
#: XIDs that indicate hardware (memory, bus, NVLink, GSP) rather than an application's fault.
HARDWARE_XIDS = {48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 123, 136, 140, 143, 144,
                 145, 146, 147, 148, 149, 150, 154, 155, 156, 158}
_XID_LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if mask & bit]


def _nvml_error(exc: Exception) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class NvmlGpu:
    """One GPU seen through NVML (module `nv`: pynvml, or a fake in tests). Every read that
    raises is kept as an error string under `errors`; nothing here raises past `open`."""

    def __init__(self, nv: Any, uuid: str | None, pci_bus_id: str | None, index: int) -> None:
        self.nv = nv
        self.handle = None
        self.located_by = None
        attempts = [("uuid", nv.nvmlDeviceGetHandleByUUID, uuid),
                    ("pci_bus_id", nv.nvmlDeviceGetHandleByPciBusId, pci_bus_id),
                    ("index", nv.nvmlDeviceGetHandleByIndex, index)]
        errors = []
        for how, fn, key in attempts:
            if key is None:
                continue
            try:
                self.handle = fn(key)
                self.located_by = how
                break
            except Exception as exc:  # noqa: BLE001 - try the next way of naming the GPU
                errors.append(f"{how}: {_nvml_error(exc)}")
        if self.handle is None:
            raise RuntimeError("NVML does not know this GPU (" + "; ".join(errors) + ")")
        self.events = None
        self.events_error: str | None = None

    def read(self, out: dict[str, Any], key: str, fn_name: str, *args: Any) -> Any:
        fn = getattr(self.nv, fn_name, None)
        if fn is None:
            out.setdefault("errors", {})[key] = f"{fn_name} not in this nvidia-ml-py"
            return None
        try:
            value = fn(self.handle, *args)
        except Exception as exc:  # noqa: BLE001 - NVMLError_NotSupported and friends
            out.setdefault("errors", {})[key] = _nvml_error(exc)
            return None
        out[key] = value
        return value

    def clock_reasons(self, out: dict[str, Any]) -> Any:
        for fn in ("nvmlDeviceGetCurrentClocksEventReasons",
                   "nvmlDeviceGetCurrentClocksThrottleReasons"):
            if hasattr(self.nv, fn):
                return self.read(out, "clock_event_reasons", fn)
        out.setdefault("errors", {})["clock_event_reasons"] = "no clock-event reason call"
        return None

    def snapshot(self) -> dict[str, Any]:
        """The counters once: ECC, remapped rows, retired pages, PCIe, NVLink, power, heat."""
        s: dict[str, Any] = {"t_monotonic": time.monotonic()}
        mode = self.read(s, "ecc_mode", "nvmlDeviceGetEccMode")
        if mode is not None:
            s["ecc_mode"] = {"current": int(mode[0]), "pending": int(mode[1])}
        for kind, etype in (("uncorrected", NVML_UNCORRECTED), ("corrected", NVML_CORRECTED)):
            for scope, ctype in (("volatile", NVML_VOLATILE), ("aggregate", NVML_AGGREGATE)):
                self.read(s, f"ecc_{kind}_{scope}", "nvmlDeviceGetTotalEccErrors", etype, ctype)
        rows = self.read(s, "remapped_rows", "nvmlDeviceGetRemappedRows")
        if rows is not None:
            s["remapped_rows"] = {"correctable": int(rows[0]), "uncorrectable": int(rows[1]),
                                  "pending": bool(rows[2]), "failure": bool(rows[3])}
        for cause, name in ((0, "multiple_single_bit"), (1, "double_bit")):
            pages = self.read(s, f"retired_pages_{name}", "nvmlDeviceGetRetiredPages", cause)
            if pages is not None:
                s[f"retired_pages_{name}"] = len(pages)
        pending = self.read(s, "retired_pages_pending", "nvmlDeviceGetRetiredPagesPendingStatus")
        if pending is not None:
            s["retired_pages_pending"] = bool(pending)
        for key, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                        ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                        ("pcie_gen_gpu_max", "nvmlDeviceGetGpuMaxPcieLinkGeneration"),
                        ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                        ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth"),
                        ("pcie_replay_counter", "nvmlDeviceGetPcieReplayCounter"),
                        ("power_mw", "nvmlDeviceGetPowerUsage"),
                        ("power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit")):
            self.read(s, key, fn)
        self.read(s, "temperature_c", "nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)
        self.read(s, "sm_clock_mhz", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM)
        self.clock_reasons(s)
        for policy, code in NVML_PERF_POLICY.items():
            viol = self.read(s, f"violation_{policy}", "nvmlDeviceGetViolationStatus", code)
            if viol is not None:
                s[f"violation_{policy}"] = {"reference_ns": int(viol.referenceTime),
                                            "violation_ns": int(viol.violationTime)}
        links: dict[str, Any] = {}
        for link in range(NVML_NVLINK_MAX_LINKS):
            entry: dict[str, Any] = {}
            state = self.read(entry, "active", "nvmlDeviceGetNvLinkState", link)
            if state is None:
                links[str(link)] = {"error": entry["errors"]["active"]}
                continue
            entry["active"] = bool(state)
            for name, counter in NVML_NVLINK_ERRORS.items():
                self.read(entry, name, "nvmlDeviceGetNvLinkErrorCounter", link, counter)
            links[str(link)] = entry
        s["nvlink"] = links
        return s

    def sample(self) -> dict[str, Any]:
        """What changes under load: clock-event reasons, PCIe generation/width, SM clock."""
        s: dict[str, Any] = {"t_monotonic": time.monotonic()}
        self.clock_reasons(s)
        self.read(s, "pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration")
        self.read(s, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth")
        self.read(s, "sm_clock_mhz", "nvmlDeviceGetClockInfo", NVML_CLOCK_SM)
        self.read(s, "power_mw", "nvmlDeviceGetPowerUsage")
        return s

    def watch_xids(self) -> None:
        try:
            self.events = self.nv.nvmlEventSetCreate()
            self.nv.nvmlDeviceRegisterEvents(self.handle, NVML_XID_CRITICAL, self.events)
        except Exception as exc:  # noqa: BLE001 - registration is refused on some systems
            self.events_error = _nvml_error(exc)
            self.events = None

    def drain_xids(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        if self.events is None:
            return found
        for _ in range(1000):
            try:
                data = self.nv.nvmlEventSetWait_v2(self.events, 0)
            except Exception as exc:  # noqa: BLE001 - Timeout: no more events
                if getattr(exc, "value", None) != NVML_ERROR_TIMEOUT:
                    self.events_error = _nvml_error(exc)
                break
            found.append({"event_type": int(data.eventType), "xid": int(data.eventData)})
        with contextlib.suppress(Exception):  # freeing is best effort
            self.nv.nvmlEventSetFree(self.events)
        self.events = None
        return found


class LoadSampler:
    """Samples `NvmlGpu.sample` every `interval_s` in a thread while the GPU is busy."""

    def __init__(self, gpu: NvmlGpu | None, interval_s: float = 0.005) -> None:
        import threading
        self.gpu, self.interval_s = gpu, interval_s
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set() and len(self.samples) < 5000:
            self.samples.append(self.gpu.sample())  # type: ignore[union-attr]
            self._stop.wait(self.interval_s)

    def __enter__(self) -> LoadSampler:
        if self.gpu is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gpu is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self.samples.append(self.gpu.sample())  # one right at the end of the load


def parse_kernel_xids(text: str) -> list[dict[str, Any]]:
    """XID lines from /dev/kmsg records ('pri,seq,usec,flags;msg') or dmesg ('[ secs] msg')."""
    found = []
    for line in text.splitlines():
        match = _XID_LINE.search(line)
        if not match:
            continue
        t = None
        head = line.split(";", 1)[0].split(",")
        if ";" in line and len(head) >= 3 and head[2].isdigit():
            t = int(head[2]) / 1e6
        else:
            stamp = re.match(r"\s*\[\s*(\d+\.\d+)\]", line)
            t = float(stamp.group(1)) if stamp else None
        found.append({"pci": match.group(1).lower(), "xid": int(match.group(2)),
                      "t_monotonic": t, "line": line.strip()[:300]})
    return found


def read_kernel_log() -> dict[str, Any]:
    """The kernel log when this process may read it (/dev/kmsg, else `dmesg`)."""
    chunks: list[str] = []
    try:
        fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        try:
            while len(chunks) < 200000:
                try:
                    chunks.append(os.read(fd, 8192).decode(errors="replace").rstrip("\n"))
                except BlockingIOError:
                    break
                except BrokenPipeError:  # a record was overwritten while reading: go on
                    continue
        finally:
            os.close(fd)
        return {"readable": True, "source": "/dev/kmsg", "text": "\n".join(chunks)}
    except OSError as exc:
        first = f"/dev/kmsg: {exc.strerror or exc}"
    dmesg = shutil.which("dmesg")
    if dmesg is None:
        return {"readable": False, "why": f"{first}; no dmesg on PATH"}
    try:
        done = subprocess.run([dmesg], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"readable": False, "why": f"{first}; dmesg: {exc}"}
    if done.returncode != 0:
        return {"readable": False,
                "why": f"{first}; dmesg exited {done.returncode}: {done.stderr.strip()[:200]}"}
    return {"readable": True, "source": "dmesg", "text": done.stdout}


def _pci_prefix(bus_id: str | None) -> str | None:
    """'0000:00:06.0' -> '0000:00:06' (how NVRM names the GPU in an XID line)."""
    if not bus_id:
        return None
    return pci_sysfs_name(bus_id).rsplit(".", 1)[0]


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


class HealthPart(Base):

    def nvml_open(self, mine: dict[str, Any]) -> None:
        h = self.health
        h["window"] = [time.monotonic(), None]
        if self.device.type != "cuda":
            h["why"] = f"no GPU in this run (backend {self.backend})"
            return
        try:
            import pynvml as nv
        except ImportError as exc:
            h["why"] = f"nvidia-ml-py is not installed (import pynvml: {exc})"
            return
        try:
            nv.nvmlInit()
            gpu = NvmlGpu(nv, mine.get("uuid"), mine.get("pci_bus_id"), self.local_rank)
        except Exception as exc:  # noqa: BLE001 - no driver library, no permission, …
            h["why"] = f"NVML unusable: {_nvml_error(exc)}"
            return
        try:
            h["driver_cuda"] = nv.nvmlSystemGetCudaDriverVersion()
            h["driver_version"] = nv.nvmlSystemGetDriverVersion()
        except Exception:  # noqa: BLE001 - informative only
            pass
        h.update(available=True, located_by=gpu.located_by, pci_bus_id=mine.get("pci_bus_id"))
        h["before"] = gpu.snapshot()
        gpu.watch_xids()
        self.nvml = gpu

    def health_finish(self) -> dict[str, Any]:
        h = self.health
        gpu = self.nvml
        if gpu is not None:
            h["after"] = gpu.snapshot()
            h["xid_events"] = gpu.drain_xids()
            h["xid_watch_error"] = gpu.events_error
            h["window"][1] = time.monotonic()
            log = read_kernel_log()
            xids = parse_kernel_xids(log.pop("text", ""))
            prefix = _pci_prefix(h.get("pci_bus_id"))
            if prefix:  # NVRM names the GPU by PCI domain:bus:device; keep this rank's only
                xids = [x for x in xids if _pci_prefix(x["pci"] + ".0") == prefix]
            log["xids"] = xids
            h["kernel_log"] = log
            with contextlib.suppress(Exception):
                gpu.nv.nvmlShutdown()
        return h
