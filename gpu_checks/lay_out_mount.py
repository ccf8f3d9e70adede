"""Write the files of the ConfigMap of `imagekit cluster gpu-preflight --script
gpu_checks/preflight/__main__.py` into DIR as its Pod's volume lays them out (items:
preflight/<module>.py), so that `cd DIR && python3 -m preflight` runs exactly what the Pod runs.
Prints the Pod's command.

    python gpu_checks/lay_out_mount.py DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from imagekit import packaged
from imagekit.cluster.preflight import PreflightOptions, render_preflight
from imagekit.oci import ImageReference


def main(target: Path) -> None:
    pinned = ImageReference.parse("registry.invalid/any@sha256:" + "0" * 64)
    pod, configmap = render_preflight(pinned, PreflightOptions(
        script=packaged.path("preflight", "__main__.py")), "lay-out")
    volume = pod["spec"]["volumes"][0]["configMap"]
    for item in volume["items"]:
        path = target / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(configmap["data"][item["key"]])
    container = pod["spec"]["containers"][0]
    print(f"cd {container['workingDir']} && {' '.join(container['command'])}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
