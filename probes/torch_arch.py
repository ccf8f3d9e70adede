"""Hopper readiness of the image's torch: "sm_90" in `torch.cuda.get_arch_list()`.

A CPU build (torch.version.cuda is None, empty arch list) is a FAIL with that reason; an image
without torch says DEFERRED. Passing does not prove any kernel runs (that is the GPU phase)."""

import sys

from _common import emit

WANT = "sm_90"


def main():
    try:
        import torch
    except ImportError as exc:
        return emit("torch_arch", "DEFERRED", f"torch is not installed in this image ({exc})")
    arch = list(torch.cuda.get_arch_list())
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "arch_list": arch}
    if WANT in arch:
        return emit("torch_arch", "PASS", f"{WANT} in torch.cuda.get_arch_list()", **info)
    if torch.version.cuda is None:
        return emit("torch_arch", "FAIL", f"CPU build of torch {torch.__version__} "
                    f"(torch.version.cuda is None, arch list {arch}): no {WANT}", **info)
    return emit("torch_arch", "FAIL", f"{WANT} not in arch list {arch}", **info)


if __name__ == "__main__":
    sys.exit(main())
