"""NVML health checks of the GPU preflight (gpu_checks/preflight/health.py): the collector
against a stand-in pynvml module (CI has no GPU), and every verdict with passing and failing
readings."""

from __future__ import annotations

import time
from types import ModuleType
from typing import Any

import pytest

from tests.gpu.fakenvml import FakeNvml


def rank_entry(preflight: ModuleType, nv: FakeNvml, rank: int = 0,
               kernel_xids: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """What a rank gathers: before/after snapshots, load samples, XID events, kernel log."""
    gpu = preflight.NvmlGpu(nv, "GPU-0", "0000:00:06.0", 0)
    h: dict[str, Any] = {"rank": rank, "available": True, "window": [time.monotonic(), None]}
    h["before"] = gpu.snapshot()
    gpu.watch_xids()
    with preflight.LoadSampler(gpu, 0.001) as sampler:
        while len(sampler.samples) < 10:  # the clock check judges >= 5 windows of samples
            time.sleep(0.002)
    h["load_samples"] = sampler.samples
    h["after"] = gpu.snapshot()
    h["xid_events"] = gpu.drain_xids()
    h["xid_watch_error"] = gpu.events_error
    h["window"][1] = time.monotonic()
    h["kernel_log"] = {"readable": kernel_xids is not None, "why": "test",
                       "xids": kernel_xids or []}
    return h


def judge(preflight: ModuleType, entries: list[dict[str, Any]], world: int = 1
          ) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    checks, notes = preflight.health_checks(entries, world)
    return {c["name"]: c for c in checks}, {n["name"]: n for n in notes}


def test_healthy_h200_passes_and_says_what_does_not_apply(preflight: ModuleType) -> None:
    checks, notes = judge(preflight, [rank_entry(preflight, FakeNvml())])
    assert {n: c["status"] for n, c in checks.items()} == {
        "nvml-ecc": "PASS", "nvml-remapped-rows": "PASS", "nvml-clock-events": "PASS",
        "nvml-pcie": "PASS", "nvml-xid": "PASS"}
    # Hopper remaps rows: retired pages are N/A, not PASS; one GPU has no NVLink
    assert notes["nvml-retired-pages"]["status"] == "N/A"
    assert "remap rows instead" in notes["nvml-retired-pages"]["detail"]
    assert "one GPU" in notes["nvml-nvlink"]["detail"]
    assert checks["nvml-pcie"]["data"]["per_rank"]["0"]["gen_under_load"] == 5


@pytest.mark.parametrize("fake,name,words", [
    (FakeNvml(ecc=(0, 1)), "nvml-ecc", "ECC is disabled"),
    (FakeNvml(ecc_errors={(1, 0): 2}), "nvml-ecc", "2 volatile uncorrectable"),
    (FakeNvml(ecc_errors={(1, 1): 1}), "nvml-ecc", "1 aggregate uncorrectable"),
    (FakeNvml(remapped=(0, 1, 1, 0)), "nvml-remapped-rows", "row remap is pending"),
    (FakeNvml(remapped=(0, 8, 0, 1)), "nvml-remapped-rows", "remapping FAILED"),
    (FakeNvml(reasons=[0x40]), "nvml-clock-events", "hw_thermal_slowdown in every window"),
    (FakeNvml(reasons=[0x0, 0x8 | 0x4]), "nvml-clock-events", "hw_slowdown"),
    (FakeNvml(pcie={"gen": 4, "gen_max": 5, "gen_gpu_max": 5, "width": 16, "width_max": 16}),
     "nvml-pcie", "gen 4 under load, max 5"),
    (FakeNvml(pcie={"gen": 5, "gen_max": 5, "gen_gpu_max": 5, "width": 8, "width_max": 16}),
     "nvml-pcie", "x8, max x16"),
    (FakeNvml(replays=[3, 9]), "nvml-pcie", "replay counter rose by 6"),
    (FakeNvml(nvlinks=18, nvlink_down={7}), "nvml-nvlink", "NVLink(s) 7 down while 17 are up"),
    (FakeNvml(nvlinks=18, nvlink_errors=[0, 4]), "nvml-nvlink", "link0.replay +4"),
    (FakeNvml(xids=[79]), "nvml-xid", "XID 79 reported by NVML"),
])
def test_each_fault_fails_its_check_naming_the_rank(preflight: ModuleType, fake: FakeNvml,
                                                    name: str, words: str) -> None:
    healthy = rank_entry(preflight, FakeNvml(), rank=0)
    checks, _ = judge(preflight, [healthy, rank_entry(preflight, fake, rank=1)], world=2)
    assert checks[name]["status"] == "FAIL", checks[name]
    assert words in checks[name]["detail"] and "rank 1" in checks[name]["detail"]
    assert "rank 0" not in checks[name]["detail"]
    others = {n: c["status"] for n, c in checks.items() if n != name}
    assert set(others.values()) == {"PASS"}, others


def test_a_transient_slowdown_is_within_noise_not_a_fail(preflight: ModuleType) -> None:
    """One sample of the load slowed (one window of five): PASS, named "within noise"; the same
    reason all through the load: FAIL (above). Every window is kept in the data."""
    checks, _ = judge(preflight, [rank_entry(preflight, FakeNvml(reasons=[0x0, 0x40, 0x0]))])
    clock = checks["nvml-clock-events"]
    assert clock["status"] == "PASS", clock
    assert "within noise" in clock["detail"] and "hw_thermal_slowdown" in clock["detail"]
    windows = clock["data"]["per_rank"]["0"]["windows"]
    assert len(windows) == 5 and sum(w["slowed_fraction"] > 0 for w in windows) == 1
    assert clock["data"]["per_rank"]["0"]["judged_band"] == "NOISE"


def test_power_cap_is_named_but_not_a_fault(preflight: ModuleType) -> None:
    entry = rank_entry(preflight, FakeNvml(reasons=[0x4]))
    entry["load"] = {"ops": 700, "seconds": 1.0, "violation_ns": {"power": 202_000_000,
                                                                  "thermal": 0}}
    checks, _ = judge(preflight, [entry])
    clock = checks["nvml-clock-events"]
    assert clock["status"] == "PASS"
    assert "sw_power_cap" in clock["detail"] and "202 ms" in clock["detail"]
    entry["load"]["violation_ns"]["thermal"] = 5_000_000
    assert judge(preflight, [entry])[0]["nvml-clock-events"]["status"] == "FAIL"


def test_kernel_log_xids_during_the_run_and_hardware_ones_before(preflight: ModuleType) -> None:
    t = time.monotonic()
    during = [{"pci": "0000:00:06", "xid": 13, "t_monotonic": t + 5, "line": "…"}]
    checks, _ = judge(preflight, [rank_entry(preflight, FakeNvml(), kernel_xids=during)])
    assert checks["nvml-xid"]["status"] == "FAIL" and "during the run" in \
        checks["nvml-xid"]["detail"]
    old_app = [{"pci": "0000:00:06", "xid": 13, "t_monotonic": 1.0, "line": "…"}]
    checks, _ = judge(preflight, [rank_entry(preflight, FakeNvml(), kernel_xids=old_app)])
    assert checks["nvml-xid"]["status"] == "PASS"  # an application's XID before the run
    old_hw = [{"pci": "0000:00:06", "xid": 48, "t_monotonic": 1.0, "line": "…"}]
    checks, _ = judge(preflight, [rank_entry(preflight, FakeNvml(), kernel_xids=old_hw)])
    assert checks["nvml-xid"]["status"] == "FAIL" and "since boot" in checks["nvml-xid"]["detail"]


def test_kernel_log_parsing(preflight: ModuleType) -> None:
    kmsg = ("4,1234,71338031,-;NVRM: Xid (PCI:0000:18:00): 79, pid=0, GPU has fallen off "
            "the bus.\n6,1235,71338032,-;unrelated")
    dmesg = "[  812.118321] NVRM: Xid (PCI:0000:3B:00): 48, pid=2133, DBE (0x1) detected"
    assert [(x["xid"], x["pci"], x["t_monotonic"]) for x in preflight.parse_kernel_xids(kmsg)] \
        == [(79, "0000:18:00", 71.338031)]
    assert [(x["xid"], x["pci"], x["t_monotonic"]) for x in preflight.parse_kernel_xids(dmesg)] \
        == [(48, "0000:3b:00", 812.118321)]


def test_unreadable_counters_defer_and_missing_nvml_defers_all(preflight: ModuleType) -> None:
    entry = rank_entry(preflight, FakeNvml(remapped=None))  # neither remap nor retired pages
    checks, _ = judge(preflight, [entry])
    assert checks["nvml-remapped-rows"]["status"] == "DEFERRED"
    missing = [{"rank": 0, "available": False, "why": "nvidia-ml-py is not installed"}]
    checks, notes = judge(preflight, missing)
    assert {c["status"] for c in checks.values()} == {"DEFERRED"} and not notes
    assert all("nvidia-ml-py is not installed" in c["detail"] for c in checks.values())


def test_pre_ampere_gpu_is_judged_by_retired_pages(preflight: ModuleType) -> None:
    checks, notes = judge(preflight, [rank_entry(preflight, FakeNvml(remapped=None,
                                                                     retired_supported=True))])
    assert checks["nvml-remapped-rows"]["status"] == "PASS"
    assert "nvml-retired-pages" not in notes


def test_the_real_h200_reading_passes(preflight: ModuleType) -> None:
    """An H200's own NVML reading (committed sample) judged again here."""
    import json
    from pathlib import Path

    sample = Path(__file__).resolve().parents[2] / "gpu_checks" / "samples" / \
        "2026-12-01-h200x1.json"
    record = json.loads(sample.read_text())
    checks, notes = preflight.health_checks(record["health"]["per_rank"], 1)
    assert {c["status"] for c in checks} == {"PASS"}
    assert {n["name"] for n in notes} == {"nvml-retired-pages", "nvml-nvlink"}
