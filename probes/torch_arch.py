"""GPU readiness of the image's torch for the target GPUs: each target's compute capability
against `torch.cuda.get_arch_list()` (sm_XY SASS, or compute_XY PTX the driver can JIT) and,
with `driver=X.Y`, the image's CUDA against what the node's driver supports.

Arguments (probe plan `torch_arch=sm_90,sm_100,driver=12.4`): target GPUs as `sm_XY` or `X.Y`
(default sm_90: H100/H200; B200 is sm_100), and optionally `driver=X.Y`. A CPU build
(torch.version.cuda None, empty arch list) is a FAIL with that reason; an image without torch
says DEFERRED. Passing does not prove any kernel runs (that is the GPU phase)."""

import os
import re
import sys

from _common import emit

try:  # the fit rules are one file, the preflight package's fit.py: the cluster probe's
    from _cudafit import fit_checks  # ConfigMap carries it beside the probes as _cudafit.py
except ImportError:  # `imagekit probe` mounts the package at /imagekit-preflight; a checkout
    _here = os.path.dirname(os.path.abspath(__file__))  # has it at gpu_checks/preflight, a
    for _lib in ("/imagekit-preflight",                 # wheel at site-packages/preflight
                 os.path.join(_here, os.pardir, "gpu_checks", "preflight"),
                 os.path.join(_here, os.pardir, os.pardir, os.pardir, "preflight")):
        if os.path.isfile(os.path.join(_lib, "fit.py")):
            sys.path.insert(0, _lib)
            break
    from fit import fit_checks

DEFAULT_TARGETS = ["sm_90"]


def parse_target(text):
    """'sm_100' or '10.0' -> (10, 0); None when neither."""
    match = re.fullmatch(r"sm_(\d+)(\d)[af]?", text) or re.fullmatch(r"(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def main(argv):
    targets, driver, bad = [], None, []
    for arg in argv:
        if arg.startswith("driver="):
            driver = arg.split("=", 1)[1]
        elif parse_target(arg):
            targets.append(arg)
        else:
            bad.append(arg)
    if bad:
        return emit("torch_arch", "ERROR", f"unknown argument(s) {bad}: give sm_XY, X.Y or "
                    "driver=X.Y")
    targets = targets or DEFAULT_TARGETS
    try:
        import torch
    except ImportError as exc:
        return emit("torch_arch", "DEFERRED", f"torch is not installed in this image ({exc})")
    arch = list(torch.cuda.get_arch_list())
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "arch_list": arch,
            "targets": targets, "driver": driver}
    if torch.version.cuda is None:
        return emit("torch_arch", "FAIL", f"CPU build of torch {torch.__version__} "
                    f"(torch.version.cuda is None, arch list {arch}): nothing runs on "
                    f"{', '.join(targets)}", **info)
    results = []
    for target in targets:
        for result in fit_checks(torch.version.cuda, arch, parse_target(target),
                                 driver, where=f"for target {target}"):
            if result["name"] == "fit-arch" or driver is not None:
                results.append(result)
    order = ["ERROR", "FAIL", "DEFERRED", "PASS"]
    status = next(s for s in order if s in [r["status"] for r in results] + ["PASS"])
    failing = [r for r in results if r["status"] != "PASS"]
    detail = "; ".join(r["detail"] for r in (failing or results))
    return emit("torch_arch", status, detail, checks=results, **info)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
