"""Bad spec and lock files: one line on stderr, exit 2, before any engine call."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.errors import SpecError
from imagekit.spec import load_lock, load_spec, resolve_image
from imagekit.spec.lock import render_lock

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/


def _spec_copy(tmp_path: Path, edit=None, lock: str | None = None) -> Path:
    root = tmp_path / "dockerfiles"
    shutil.copytree(ASSETS / "dockerfiles", root,
                    ignore=shutil.ignore_patterns("standins", "images.local.lock"))
    spec = root / "images.toml"
    if edit is not None:
        spec.write_text(edit(spec.read_text()))
    if lock is not None:
        (root / "images.local.lock").write_text(lock)
    return spec


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def _assert_one_line(done: subprocess.CompletedProcess, *needles: str) -> None:
    assert done.returncode == 2, done.stderr + done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("imagekit: error: ")
    for needle in needles:
        assert needle in lines[0]
    assert done.stdout == ""


LOCAL_LOCK = """version = 1
profile = "local"
[bases.sglang]
tag = "127.0.0.1:5001/imagekit-standins/sglang-base:cu13-standin"
digest = "sha256:{h}"
[bases.vllm]
tag = "127.0.0.1:5001/imagekit-standins/vllm-base:standin"
digest = "sha256:{h}"
""".format(h="ab" * 32)


def test_unknown_engine_is_one_line_exit_2(tmp_path: Path) -> None:
    spec = _spec_copy(tmp_path, lambda t: t.replace('engine = "vllm"', 'engine = "tgi"'))
    _assert_one_line(_cli("build", "vllm", "--spec", str(spec)), "unknown engine 'tgi'",
                     "images.toml")


def test_missing_dockerfile_is_one_line_exit_2(tmp_path: Path) -> None:
    spec = _spec_copy(tmp_path)
    (spec.parent / "vllm" / "Dockerfile").unlink()
    _assert_one_line(_cli("build", "--all-images", "--spec", str(spec)), "Dockerfile",
                     "does not exist")


def test_tag_without_lock_is_one_line_exit_2(tmp_path: Path) -> None:
    spec = _spec_copy(tmp_path)  # no images.local.lock at all
    _assert_one_line(_cli("build", "sglang", "--spec", str(spec)), "has no digest in the lock",
                     "images.local.lock")


def test_moved_tag_in_spec_no_longer_matches_lock(tmp_path: Path) -> None:
    spec = _spec_copy(tmp_path, lambda t: t.replace("vllm-base:standin", "vllm-base:other"),
                      lock=LOCAL_LOCK)
    loaded = load_spec(spec)
    assert resolve_image(loaded, "sglang").base_digest.hex == "ab" * 32
    with pytest.raises(SpecError, match="has no digest in the lock"):
        resolve_image(loaded, "vllm")


PADDED_LOCK = """version = 1
profile = "local"
[bases.sglang]
tag = "127.0.0.1:5001/imagekit-standins/sglang-base:cu13-standin-layers63"
digest = "sha256:{h}"
padded_from = "127.0.0.1:5001/imagekit-standins/sglang-base:{base}"
[mirrors.sglang]
tag = "127.0.0.1:5001/imagekit-mirror/sglang-base:cu13-standin-layers63"
digest = "sha256:{h}"
padded_from = "127.0.0.1:5001/imagekit-mirror/sglang-base:cu13-standin"
"""


def test_a_padded_stand_in_serves_as_the_specs_base(tmp_path: Path) -> None:
    """`standins build --layers 63` pushes `…-layers63` and pins it for the spec's tag (the spec
    is unchanged); the build and the mirror check then use the padded image."""
    spec = _spec_copy(tmp_path, lock=PADDED_LOCK.format(h="cd" * 32, base="cu13-standin"))
    image = resolve_image(load_spec(spec), "sglang")
    assert str(image.base_tag).endswith(":cu13-standin-layers63")
    assert image.base_digest.hex == "cd" * 32
    assert str(image.mirror).endswith("mirror/sglang-base:cu13-standin-layers63")
    assert image.mirror_digest is not None and image.mirror_digest.hex == "cd" * 32
    assert "padded_from" in render_lock(load_lock(spec.parent / "images.local.lock", "local"))


def test_a_padded_stand_in_of_another_tag_is_refused(tmp_path: Path) -> None:
    spec = _spec_copy(tmp_path, lock=PADDED_LOCK.format(h="cd" * 32, base="other"))
    with pytest.raises(SpecError, match="has no digest in the lock"):
        resolve_image(load_spec(spec), "sglang")


def test_placeholder_production_lock_is_refused(tmp_path: Path) -> None:
    _assert_one_line(_cli("build", "sglang", "--profile", "production", "--spec",
                          str(ASSETS / "dockerfiles" / "images.toml")), "placeholder")


def test_digest_in_spec_base_is_rejected(tmp_path: Path) -> None:
    spec = _spec_copy(tmp_path, lambda t: t.replace(
        "vllm-base:standin", "vllm-base:standin@sha256:" + "cd" * 32))
    _assert_one_line(_cli("probe", "vllm", "--spec", str(spec)), "must be a tag")


def test_unknown_probe_and_profile(tmp_path: Path) -> None:
    spec = _spec_copy(tmp_path, lambda t: t.replace('"torch_arch", ', '"gpu_burn", ', 1))
    _assert_one_line(_cli("images", "verify", "--spec", str(spec)), "unknown probe")
    _assert_one_line(_cli("build", "sglang", "--profile", "staging", "--spec",
                          str(ASSETS / "dockerfiles" / "images.toml")), "unknown profile")


def test_not_toml_and_missing_spec(tmp_path: Path) -> None:
    bad = tmp_path / "images.toml"
    bad.write_text("version = [\n")
    _assert_one_line(_cli("build", "--all-images", "--spec", str(bad)), "not valid TOML")
    _assert_one_line(_cli("build", "--all-images", "--spec", str(tmp_path / "nope.toml")),
                     "images spec not found")


def test_lock_of_another_profile_is_rejected(tmp_path: Path) -> None:
    lock = tmp_path / "images.local.lock"
    lock.write_text(LOCAL_LOCK.replace('profile = "local"', 'profile = "production"'))
    with pytest.raises(SpecError, match="not 'local'"):
        load_lock(lock, "local")


def test_committed_spec_and_production_lock_load() -> None:
    spec = load_spec(ASSETS / "dockerfiles" / "images.toml")
    assert spec.default_profile == "local"
    assert set(spec.images) == {"sglang", "vllm"}
    lock = load_lock(spec.lock_path("production"), "production")
    assert all(entry.placeholder for entry in lock.bases.values())
    dockerfile = (ASSETS / "dockerfiles" / "sglang" / "Dockerfile").read_text()
    assert "# syntax=" not in dockerfile
    assert str(lock.bases["sglang"].digest) in dockerfile  # the default is the lock's value
    assert str(lock.bases["vllm"].digest) in (ASSETS / "dockerfiles" / "vllm" /
                                              "Dockerfile").read_text()
