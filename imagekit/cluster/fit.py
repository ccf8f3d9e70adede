"""Image-to-GPU fit for the cluster precheck: the image's CUDA version and arch list against
what a node's driver supports and its GPUs' compute capability (from NVML inside the Pod, or
GPU feature discovery labels on the Node before scheduling).

The rules are the same as gpu_checks/preflight.py's (inside the Pod, torch-only) and
probes/_cudafit.py's (in-image probe); each of those must stay self-contained, so the rules are
written three times and tests/gpu/test_gpu_fit.py checks that they agree case by case.
- SASS `sm_XY` runs on compute capability X.Z with Z >= Y (same major); `sm_XYa` only on X.Y;
  `sm_XYf` on the family X.Z, Z >= Y.
- PTX `compute_XY` is JIT-compiled by the driver for any GPU >= X.Y (`a`: X.Y only, `f`: the
  family), but only by a driver at least as new as the toolkit that wrote it.
- CUDA X.y needs a driver supporting X.y; within one major (11+) minor version compatibility
  lets it run on an older minor without PTX JIT.
"""

from __future__ import annotations

import re
from typing import Any

from imagekit.results import CheckResult, Status

#: GPU feature discovery (NVIDIA gpu-feature-discovery) node labels read by the precheck.
GFD_CUDA_MAJOR = ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver.major")
GFD_CUDA_MINOR = ("nvidia.com/cuda.driver-version.minor", "nvidia.com/cuda.driver.minor")
GFD_CC_MAJOR = "nvidia.com/gpu.compute.major"
GFD_CC_MINOR = "nvidia.com/gpu.compute.minor"


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


def node_facts(labels: dict[str, str]) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """(driver CUDA, compute capability) from a Node's GFD labels; None where absent."""
    def first(keys: tuple[str, ...]) -> str | None:
        return next((labels[k] for k in keys if k in labels), None)

    major, minor = first(GFD_CUDA_MAJOR), first(GFD_CUDA_MINOR)
    driver = (int(major), int(minor or 0)) if major and major.isdigit() and \
        (minor or "0").isdigit() else None
    cc_major, cc_minor = labels.get(GFD_CC_MAJOR), labels.get(GFD_CC_MINOR, "0")
    cc = (int(cc_major), int(cc_minor)) if cc_major and cc_major.isdigit() and \
        cc_minor.isdigit() else None
    return driver, cc


def image_fit(image_cuda: str | None, arch_list: list[str] | None,
              labels: dict[str, str], node: str) -> list[CheckResult]:
    """The two fit checks for one node, judged from its GFD labels; a node without them gives
    DEFERRED (the preflight Pod checks the fit again from NVML)."""
    driver, cc = node_facts(labels)
    results = fit_checks(image_cuda, arch_list, cc, driver, where=f"on node {node}")
    out = []
    for r in results:
        detail = r["detail"]
        if r["status"] == "DEFERRED":
            detail += " (no GPU feature discovery labels nvidia.com/cuda.driver.major / " \
                      "nvidia.com/gpu.compute.major on the node; the preflight Pod checks " \
                      "the fit again from NVML)"
        out.append(CheckResult(name=r["name"].replace("-", "_"), status=Status(r["status"]),
                               detail=detail, data={**r["data"], "node": node}))
    return out
