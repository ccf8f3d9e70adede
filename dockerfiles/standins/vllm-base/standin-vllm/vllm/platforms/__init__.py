"""Platform resolution shaped like vLLM's: `current_platform` is resolved lazily, and
`_current_platform` can be set to a `CpuPlatform()` (the pinned internal interface the record's
probe and bench client use)."""

import os

_current_platform = None


class Platform:
    device_type = ""

    def is_cpu(self) -> bool:
        return self.device_type == "cpu"


class UnspecifiedPlatform(Platform):
    device_type = ""


def _resolve() -> Platform:
    # The real vLLM probes CUDA/ROCm/TPU/XPU/CPU plugins; a zero-GPU container of a CUDA build
    # resolves to no platform at all. /dev/nvidia0 is the stand-in's only hint.
    if os.path.exists("/dev/nvidia0"):
        from vllm.platforms.cuda import CudaPlatform
        return CudaPlatform()
    return UnspecifiedPlatform()


def __getattr__(name):
    global _current_platform
    if name == "current_platform":
        if _current_platform is None:
            _current_platform = _resolve()
        return _current_platform
    raise AttributeError(name)
