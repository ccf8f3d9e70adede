"""The GPU preflight as a package in a Pod: the gpu-preflight flow ships its modules in one
ConfigMap, the volume's items lay them out as preflight/<module>.py, and `python3 -m preflight`
runs from the mount with nothing of imagekit beside it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from imagekit.cluster.preflight import PreflightOptions, add_files, render_preflight
from imagekit.oci import ImageReference

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "gpu_checks" / "preflight"
PINNED = ImageReference.parse("127.0.0.1:5003/imagekit/torch@sha256:" + "ab" * 32)


def _lay_out(pod: dict, configmap: dict, root: Path) -> None:
    """What the kubelet does with the volume: every item's key at its path (no items: flat)."""
    volume = pod["spec"]["volumes"][0]["configMap"]
    items = volume.get("items") or [{"key": k, "path": k} for k in configmap["data"]]
    for item in items:
        target = root / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(configmap["data"][item["key"]])


#: `python -m preflight` as the Pod's python runs it, with no imagekit installed: this venv's
#: editable install maps `preflight` to the checkout's gpu_checks/preflight, so its finder is
#: taken off first and only the folder the command runs in can provide the package
AS_IN_THE_POD = ("import sys, runpy; sys.meta_path[:] = [f for f in sys.meta_path if not "
                 "getattr(f, '__module__', '').startswith('__editable__')]; "
                 "sys.path[:] = [p for p in sys.path if not p.startswith('__editable__')]; "
                 "runpy.run_module('preflight', run_name='__main__', alter_sys=True)")


def _run_from(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # no imagekit on the path
    env["PYTHONWARNINGS"] = "ignore"
    return subprocess.run([sys.executable, "-c", AS_IN_THE_POD, *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_pod_ships_the_package_and_runs_it_from_the_mount(tmp_path: Path) -> None:
    pod, configmap = render_preflight(PINNED, PreflightOptions(
        script=PACKAGE / "__main__.py"), "pf")
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert sorted(configmap["data"]) == [f"preflight.{m}" for m in modules]
    volume = pod["spec"]["volumes"][0]["configMap"]
    assert {i["path"] for i in volume["items"]} == {f"preflight/{m}" for m in modules}
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["python3", "-m", "preflight"]
    assert container["workingDir"] == "/imagekit"
    assert {"name": "scripts", "mountPath": "/imagekit", "readOnly": True} in \
        container["volumeMounts"]
    mount = tmp_path / "mount"
    _lay_out(pod, configmap, mount)
    # every module imports from the mount alone: bad input is one line, exit 2, no record
    done = _run_from(mount, "--repeats", "0", "--json", str(tmp_path / "r.json"))
    assert done.returncode == 2, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("preflight:")]
    assert lines == ["preflight: error: --repeats must be >= 1, not 0"], done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "r.json").exists()
    # the same ConfigMap mounted flat (no items) cannot run it: the layout is what makes it work
    flat = tmp_path / "flat"
    pod["spec"]["volumes"][0]["configMap"].pop("items")
    _lay_out(pod, configmap, flat)
    broken = _run_from(flat, "--repeats", "0")
    assert broken.returncode == 1 and "No module named preflight" in broken.stderr


def test_baselines_and_plain_scripts_keep_their_keys(tmp_path: Path) -> None:
    pod, configmap = render_preflight(PINNED, PreflightOptions(script=PACKAGE), "pf")
    add_files(pod, configmap, {"2026-11-29-h200x2.json": "{}"})     # the fleet's baselines
    items = pod["spec"]["volumes"][0]["configMap"]["items"]
    assert {"key": "2026-11-29-h200x2.json", "path": "2026-11-29-h200x2.json"} in items
    assert len(items) == len(configmap["data"])
    script = tmp_path / "check.py"
    script.write_text("print('ok')\n")
    pod, configmap = render_preflight(PINNED, PreflightOptions(script=script), "pf")
    assert configmap["data"] == {"check.py": "print('ok')\n"}
    assert "items" not in pod["spec"]["volumes"][0]["configMap"]
    assert pod["spec"]["containers"][0]["command"] == ["python3", "/imagekit/check.py"]
    assert "workingDir" not in pod["spec"]["containers"][0]


def test_imagekit_loads_fit_and_stats_without_torch() -> None:
    """The precheck and the verdicts read the package's fit and stats: that imports no torch
    (imagekit's CLI start-up budget)."""
    code = ("import sys; import imagekit.cluster.fit, imagekit.stats, "
            "preflight.verdicts; print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "False", done.stderr
