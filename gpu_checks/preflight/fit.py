"""Image-to-GPU fit rules: the one file that every place judging the fit loads (standard library
only, no relative import, so it also runs alone).

Loaded by the preflight inside the Pod (`from .fit import fit_checks`), by the cluster precheck
(imagekit/cluster/fit.py imports it as preflight.fit) and by the in-image probe
`torch_arch` as `_cudafit` (the cluster probe's ConfigMap carries it under that name; `imagekit
probe` mounts this folder at /imagekit-preflight; in a checkout or a wheel it is beside probes/).

Why: an image whose kernels were built for another GPU generation, or for a newer CUDA than the
node's driver runs, fails only when the first kernel launches ("no kernel image is available",
"CUDA driver version is insufficient") -- long after the Pod was scheduled. The rules:
- SASS `sm_XY` runs on compute capability X.Z with Z >= Y (same major); `sm_XYa` only on X.Y;
  `sm_XYf` on the family X.Z, Z >= Y (CUDA 12.9+).
- PTX `compute_XY` is JIT-compiled by the driver for any GPU >= X.Y (`a`: X.Y only, `f`: the
  family), but only by a driver at least as new as the toolkit that wrote it.
- CUDA X.y needs a driver supporting X.y; within one major (11+) minor version compatibility
  lets it run on an older minor without PTX JIT.
"""

from __future__ import annotations

import re
from typing import Any


def check(name: str, status: str, detail: str = "", **data: Any) -> dict[str, Any]:
    return {"name": name, "status": status, "detail": detail, "data": data}


_ARCH = re.compile(r"(sm|compute)_(\d+?)(\d)([af]?)")


def parse_cuda_version(value: Any) -> tuple[int, int] | None:
    """'12.4', '12.4.1', 12040 (NVML/driver integer), (12, 4) -> (12, 4); None if unreadable."""
    if value is None or value == "":
        return None
    if isinstance(value, tuple):
        return (int(value[0]), int(value[1]))
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit() and len(value) > 3):
        number = int(value)
        return (number // 1000, (number % 1000) // 10)
    match = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?(?:\.\d+)*\s*", str(value))
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2) or 0))


def parse_arch(entry: str) -> tuple[str, int, int, str] | None:
    """'sm_90' -> ('sm', 9, 0, ''); 'compute_100f' -> ('compute', 10, 0, 'f'); else None."""
    match = _ARCH.fullmatch(entry.strip().lower())
    if not match:
        return None
    return (match.group(1), int(match.group(2)), int(match.group(3)), match.group(4))


def _arch_runs_on(major: int, minor: int, suffix: str, cc: tuple[int, int], ptx: bool) -> bool:
    if suffix == "a":
        return (major, minor) == cc
    if suffix == "f" or not ptx:
        return major == cc[0] and minor <= cc[1]
    return (major, minor) <= cc


def fit_checks(image_cuda: Any, arch_list: list[str] | None, cc: tuple[int, int] | None,
               driver_cuda: Any, where: str = "") -> list[dict[str, Any]]:
    """Two checks: `fit-cuda` (image CUDA vs what the driver supports) and `fit-arch` (image arch
    list vs the GPU's compute capability). Unknown inputs give DEFERRED saying which."""
    image_v, driver_v = parse_cuda_version(image_cuda), parse_cuda_version(driver_cuda)
    at = f" {where}" if where else ""
    data = {"image_cuda": image_cuda, "driver_cuda": driver_cuda, "arch_list": arch_list,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None}
    out = []
    minor_compat = False
    if image_v is None or driver_v is None:
        out.append(check("fit-cuda", "DEFERRED",
                         f"cannot compare CUDA versions{at}: image "
                         f"{image_cuda or 'unknown (CPU build or not given)'}, driver supports "
                         f"{driver_cuda or 'unknown'}", **data))
    elif image_v[0] > driver_v[0] or (image_v[0] == driver_v[0] and image_v[0] < 11
                                      and image_v[1] > driver_v[1]):
        out.append(check("fit-cuda", "FAIL",
                         f"image built for CUDA {image_v[0]}.{image_v[1]}, but the driver{at} "
                         f"supports CUDA up to {driver_v[0]}.{driver_v[1]}: a newer major "
                         "version needs a newer driver (the first CUDA call fails)", **data))
    elif image_v > driver_v:
        minor_compat = True
        out.append(check("fit-cuda", "PASS",
                         f"image CUDA {image_v[0]}.{image_v[1]} on a driver{at} supporting "
                         f"{driver_v[0]}.{driver_v[1]}: same major, runs under minor version "
                         "compatibility (no PTX JIT of the newer toolkit's PTX)", **data,
                         minor_version_compatibility=True))
    else:
        out.append(check("fit-cuda", "PASS",
                         f"image CUDA {image_v[0]}.{image_v[1]} <= {driver_v[0]}.{driver_v[1]} "
                         f"supported by the driver{at}", **data))
    if cc is None:
        out.append(check("fit-arch", "DEFERRED", f"the GPU's compute capability{at} is unknown",
                         **data))
        return out
    if not arch_list:
        out.append(check("fit-arch", "FAIL" if arch_list == [] else "DEFERRED",
                         f"empty CUDA arch list in the image (CPU build of torch?): nothing runs "
                         f"on sm_{cc[0]}{cc[1]}" if arch_list == [] else
                         "the image's arch list is unknown", **data))
        return out
    sass: list[str] = []
    ptx: list[str] = []
    unknown: list[str] = []
    for entry in arch_list:
        parsed = parse_arch(entry)
        if parsed is None:
            unknown.append(entry)
            continue
        kind, major, minor, suffix = parsed
        if _arch_runs_on(major, minor, suffix, cc, ptx=kind == "compute"):
            (ptx if kind == "compute" else sass).append(entry)
    want = f"sm_{cc[0]}{cc[1]}"
    extra = {"sass_for_gpu": sass, "ptx_for_gpu": ptx, "unparsed": unknown}
    if sass:
        out.append(check("fit-arch", "PASS",
                         f"{', '.join(sass)} in the image's arch list runs on {want} "
                         f"(compute capability {cc[0]}.{cc[1]}{at})", **data, **extra))
    elif ptx and minor_compat:
        out.append(check("fit-arch", "FAIL",
                         f"only PTX ({', '.join(ptx)}) could serve {want}, and the driver{at} is "
                         f"older than the image's CUDA {image_cuda}: it cannot JIT-compile that "
                         "PTX", **data, **extra))
    elif ptx:
        out.append(check("fit-arch", "PASS",
                         f"no SASS for {want}, but PTX {', '.join(ptx)} is JIT-compiled by the "
                         f"driver{at} at load (slower first start)", **data, **extra))
    else:
        out.append(check("fit-arch", "FAIL",
                         f"no entry of the image's arch list {arch_list} runs on {want} (compute "
                         f"capability {cc[0]}.{cc[1]}{at}): 'no kernel image is available'",
                         **data, **extra))
    return out
