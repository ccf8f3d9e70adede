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
