"""Image-to-GPU fit for the cluster precheck: the image's CUDA version and arch list against
what a node's driver supports and its GPUs' compute capability (from NVML inside the Pod, or
GPU feature discovery labels on the Node before scheduling).

The rules are written once, in gpu_checks/preflight/fit.py (standard library only), which
the preflight package loads inside the Pod and the in-image probe `torch_arch` loads as
`_cudafit`; this module adds the node side (GPU feature discovery labels) and CheckResults.
"""

from __future__ import annotations

from imagekit.results import CheckResult, Status
from preflight.fit import check, fit_checks, parse_arch, parse_cuda_version

__all__ = ["check", "fit_checks", "image_fit", "node_facts", "parse_arch", "parse_cuda_version"]

#: GPU feature discovery (NVIDIA gpu-feature-discovery) node labels read by the precheck.
GFD_CUDA_MAJOR = ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver.major")
GFD_CUDA_MINOR = ("nvidia.com/cuda.driver-version.minor", "nvidia.com/cuda.driver.minor")
GFD_CC_MAJOR = "nvidia.com/gpu.compute.major"
GFD_CC_MINOR = "nvidia.com/gpu.compute.minor"


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
