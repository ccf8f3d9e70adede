"""Reproducible builds on the real build engine (docker 28.5, BuildKit 0.25): two builder
instances that share nothing but the registry give one digest; a Dockerfile that writes the
time makes `--rebuild` FAIL naming that file; an auditor in an empty folder, given the commit
and the lock, gets the digest `images verify` pushed.

Each rebuild starts a fresh builder that pulls its base again, so there is one of each kind:
the auditor's PASS on the vLLM stand-in's fix, and the FAIL on a small base, whose difference is
that one file and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.build.rebuild import rebuild_image
from imagekit.evidence import EvidenceStore
from imagekit.results import Status
from imagekit.spec import load_lock, load_spec, write_lock

pytestmark = [pytest.mark.docker, pytest.mark.registry]
REPO = Path(__file__).resolve().parents[2]


#: what the FAIL case's base is pushed as (a repository of no spec image)
TINY_BASE = "imagekit-test/rebuild-base"
#: the fix layer that must make two builds differ: the build's clock time, to the nanosecond
WRITES_THE_TIME = ('RUN python3 -c "import time; '
                   "open('/etc/build-time', 'w').write(str(time.time_ns()))\"\n")


def _tiny_base(registry: str):  # -> tests.cluster.images.PushedImage
    """The suite's small python3 image (tests/cluster/images.py), pushed to `registry`: the
    FAIL case's base, so each builder pulls megabytes, not a stand-in's GB."""
    from imagekit.infra.state import registry_trust
    from imagekit.registry import RegistryClient, RegistryOptions
    from tests.cluster.images import build_layer, push_image

    with RegistryClient(registry, RegistryOptions(**registry_trust(registry))) as client:
        return push_image(client, registry, TINY_BASE, "rebuild", build_layer())


@pytest.mark.usefixtures("verified_images")   # the stand-ins built and pinned in the lock
def test_a_build_that_writes_the_time_fails_naming_the_file(tmp_path) -> None:
    """The case that must FAIL: a fix whose one layer writes the build's clock time, on a small
    base (the spec's SGLang image, rebased in a copy of the spec). The verdict names the layer
    and the file, and the evidence keeps both digests and the listing, which holds that file
    alone: everything else the two builders made is the same."""
    root = tmp_path / "spec"
    shutil.copytree(REPO / "dockerfiles", root, ignore=shutil.ignore_patterns("standins"))
    standin = load_spec(root / "images.toml").images["sglang"].base["local"]
    tiny = _tiny_base(standin.registry)
    spec_file = root / "images.toml"
    assert str(standin) in spec_file.read_text()
    spec_file.write_text(spec_file.read_text().replace(str(standin), str(tiny.reference)))
    lock_path = root / "images.local.lock"
    lock = load_lock(lock_path, "local")
    pinned = lock.bases["sglang"].model_copy(update={"tag": tiny.reference,
                                                     "digest": tiny.digest})
    write_lock(lock_path, lock.model_copy(update={"bases": {**lock.bases, "sglang": pinned}}))
    (root / "sglang" / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n" + WRITES_THE_TIME)
    spec = load_spec(spec_file)
    assert spec.images["sglang"].base["local"] == tiny.reference
    store = EvidenceStore(tmp_path / "store")
    check = rebuild_image(spec, "sglang", store, profile="local")
    assert check.status is Status.FAIL, check.detail
    assert "etc/build-time (content: " in check.detail, check.detail
    difference = json.loads((Path(check.data["evidence"]) / "difference.json").read_text())
    assert difference["equal"] is False and difference["first"] != difference["second"]
    listed = {m["path"]: m for m in difference["layer"]["members"]}
    assert set(listed) == {"etc/build-time"}, listed
    assert listed["etc/build-time"]["first"]["sha256"] != listed["etc/build-time"]["second"][
        "sha256"]


def test_the_auditor_rebuilds_the_verified_digest_from_an_empty_folder(verified_images,
                                                                       tmp_path) -> None:
    """From an empty folder: the commit (a clone) and the lock, then
    `imagekit images verify --rebuild --expect-digest D --image vllm` as a user types it."""
    expected = verified_images.entry("vllm").digest
    checkout = tmp_path / "checkout"
    if (REPO / ".git").exists():
        subprocess.run(["git", "clone", "-q", str(REPO), str(checkout)], check=True)
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        subprocess.run(["git", "-C", str(checkout), "checkout", "-q", commit], check=True)
    else:  # a checkout without history: both builds take the lock's time
        shutil.copytree(REPO / "dockerfiles", checkout / "dockerfiles")
    shutil.copy(REPO / "dockerfiles" / "images.local.lock",
                checkout / "dockerfiles" / "images.local.lock")
    auditor = tmp_path / "empty"
    auditor.mkdir()
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(auditor / "evidence")}
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "images", "verify", "--spec",
         str(checkout / "dockerfiles" / "images.toml"), "--profile", "local", "--rebuild",
         "--expect-digest", expected, "--image", "vllm"],
        cwd=auditor, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"PASS: two builders (main and fresh) gave the expected digest {expected}" in \
        done.stdout
