"""A stand-in for the nvidia-ml-py module (`pynvml`): only what NVML cannot be made to do on a
machine without a GPU. Values default to a healthy H200 as read on a real one; tests change
them to make each health check FAIL."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    def __init__(self, value: int, text: str) -> None:
        super().__init__(text)
        self.value = value


NOT_SUPPORTED = NVMLError(3, "Not Supported")


@dataclass
class FakeNvml:
    ecc: tuple[int, int] = (1, 1)
    ecc_errors: dict[tuple[int, int], int] = field(default_factory=dict)  # (type, scope) -> n
    remapped: tuple[int, int, int, int] | None = (0, 0, 0, 0)
    retired_supported: bool = False
    reasons: list[int] = field(default_factory=lambda: [0x0])
    pcie: dict[str, int] = field(default_factory=lambda: {
        "gen": 5, "gen_max": 5, "gen_gpu_max": 5, "width": 16, "width_max": 16})
    replays: list[int] = field(default_factory=lambda: [0])
    nvlinks: int = 0  # links whose state NVML reports (0: Not Supported, as on one GPU)
    nvlink_down: set[int] = field(default_factory=set)
    nvlink_errors: list[int] = field(default_factory=lambda: [0])
    xids: list[int] = field(default_factory=list)
    cuda_driver: int = 13000
    calls: int = 0

    def _next(self, values: list[int]) -> int:
        return values.pop(0) if len(values) > 1 else values[0]

    # module-level functions, as pynvml names them
    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: return self.cuda_driver
    def nvmlSystemGetDriverVersion(self) -> str: return "580.159.04"
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str: return "gpu0"
    def nvmlDeviceGetHandleByPciBusId(self, bus: str) -> str: return "gpu0"
    def nvmlDeviceGetHandleByIndex(self, i: int) -> str: return "gpu0"
    def nvmlDeviceGetEccMode(self, h: Any) -> tuple[int, int]: return self.ecc

    def nvmlDeviceGetTotalEccErrors(self, h: Any, etype: int, scope: int) -> int:
        return self.ecc_errors.get((etype, scope), 0)

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        if self.remapped is None:
            raise NOT_SUPPORTED
        return self.remapped

    def nvmlDeviceGetRetiredPages(self, h: Any, cause: int) -> list[int]:
        if not self.retired_supported:
            raise NOT_SUPPORTED
        return []

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Any) -> int:
        if not self.retired_supported:
            raise NOT_SUPPORTED
        return 0

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return self._next(self.reasons)

    def nvmlDeviceGetViolationStatus(self, h: Any, policy: int) -> Any:
        self.calls += 1
        return SimpleNamespace(referenceTime=self.calls * 1000, violationTime=0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: Any) -> int: return self.pcie["gen"]
    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: Any) -> int: return self.pcie["gen_max"]
    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, h: Any) -> int: return self.pcie["gen_gpu_max"]
    def nvmlDeviceGetCurrPcieLinkWidth(self, h: Any) -> int: return self.pcie["width"]
    def nvmlDeviceGetMaxPcieLinkWidth(self, h: Any) -> int: return self.pcie["width_max"]
    def nvmlDeviceGetPcieReplayCounter(self, h: Any) -> int: return self._next(self.replays)
    def nvmlDeviceGetPowerUsage(self, h: Any) -> int: return 650_000
    def nvmlDeviceGetEnforcedPowerLimit(self, h: Any) -> int: return 700_000
    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int: return 45
    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int: return 1980

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        if link >= self.nvlinks:
            raise NOT_SUPPORTED
        return 0 if link in self.nvlink_down else 1

    def nvmlDeviceGetNvLinkErrorCounter(self, h: Any, link: int, counter: int) -> int:
        return self._next(self.nvlink_errors) if (link, counter) == (0, 0) else 0

    def nvmlEventSetCreate(self) -> str: return "set"
    def nvmlDeviceRegisterEvents(self, h: Any, types: int, s: Any) -> None: ...

    def nvmlEventSetWait_v2(self, s: Any, timeout_ms: int) -> Any:
        if self.xids:
            return SimpleNamespace(eventType=0x8, eventData=self.xids.pop(0))
        raise NVMLError(10, "Timeout")

    def nvmlEventSetFree(self, s: Any) -> None: ...
