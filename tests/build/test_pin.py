"""`imagekit pin` writes the lock from the registry; `pin --check` fails when a tag moved."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.standins import ensure_rootfs_image

pytestmark = [pytest.mark.docker, pytest.mark.registry]
REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=300, check=False)


def _push_tiny(engine, tmp_path: Path, base: str, content: str, ref: str) -> None:
    context = tmp_path / f"ctx-{content}"
    context.mkdir()
    (context / "Dockerfile").write_text(f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\n"
                                        f"RUN echo {content} > /which\n")
    outcome = engine.build(context, tags=[ref], build_args={"BASE_IMAGE": base})
    assert outcome.ok, outcome.log[-1500:]
    engine.push(ref)


def test_pin_then_check_detects_a_moved_tag(engine, tmp_path: Path) -> None:
    base, _ = ensure_rootfs_image(engine, [])
    root = tmp_path / "dockerfiles"
    shutil.copytree(ASSETS / "dockerfiles", root,
                    ignore=shutil.ignore_patterns("standins", "images.local.lock"))
    spec = root / "images.toml"
    text = spec.read_text()
    text = text.replace("127.0.0.1:5001/imagekit-standins/sglang-base:cu13-standin",
                        "127.0.0.1:5001/imagekit-test/pin-sglang:moving")
    text = text.replace("127.0.0.1:5001/imagekit-standins/vllm-base:standin",
                        "127.0.0.1:5001/imagekit-test/pin-vllm:fixed")
    text = text.replace("127.0.0.1:5001/imagekit-mirror/sglang-base:cu13-standin",
                        "127.0.0.1:5001/imagekit-test/pin-sglang:moving")
    spec.write_text(text)
    _push_tiny(engine, tmp_path, base, "one", "127.0.0.1:5001/imagekit-test/pin-sglang:moving")
    _push_tiny(engine, tmp_path, base, "vllm", "127.0.0.1:5001/imagekit-test/pin-vllm:fixed")

    done = _cli("pin", "--spec", str(spec), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["written"] is True
    lock = (root / "images.local.lock").read_text()
    assert "imagekit-test/pin-sglang:moving" in lock
    assert _cli("pin", "--check", "--spec", str(spec)).returncode == 0

    _push_tiny(engine, tmp_path, base, "two", "127.0.0.1:5001/imagekit-test/pin-sglang:moving")
    moved = _cli("pin", "--check", "--spec", str(spec), "--json")
    assert moved.returncode == 1
    checks = {c["name"]: c for c in json.loads(moved.stdout)["checks"]}
    assert checks["sglang.base"]["status"] == "FAIL" and "moved" in checks["sglang.base"]["detail"]
    assert checks["vllm.base"]["status"] == "PASS"
    assert (root / "images.local.lock").read_text() == lock  # --check never writes
