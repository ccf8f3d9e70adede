"""Disk: a full disk under the evidence store, and --tmpdir, with the CLI as a user runs it.

The full disk is real: a 64 KiB tmpfs this test mounts (and unmounts), filled to its last few
KiB, as the evidence directory of a real `verify-copy` against the staging registry. The run
must say so in one line (exit 2) and leave no record: no attempt.json, no index line, no
half-written file that a later reader could take for a result.
"""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from .images import layer_tar, push_image

pytestmark = pytest.mark.registry


@pytest.fixture
def full_disk(tmp_path):
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs for the full-disk test: {done.stderr.strip()}")
    try:
        (mount / "fill").write_bytes(bytes(60 * 1024))
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_full_disk_is_one_line_and_nothing_is_recorded(pool, reg, full_disk):
    repo = f"test/disk-{uuid.uuid4().hex[:8]}"
    image = push_image(pool.get(reg["staging"]), repo, "v1", [layer_tar(7, 200_000)])
    ref = f"{reg['staging']}/{repo}:v1"
    evidence = full_disk / "ev"
    done = subprocess.run([sys.executable, "-m", "imagekit", "verify-mirror", ref, ref, "--json",
                           "--evidence-dir", str(evidence)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, (done.returncode, done.stdout[-300:], done.stderr[-800:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: disk full"), lines
    assert "Traceback" not in done.stderr
    assert not list(evidence.rglob("attempt.json"))
    assert not list(evidence.rglob(".attempt.json.partial"))
    index = evidence / "index.jsonl"
    assert not index.exists() or "PASS" not in index.read_text()
    assert str(image.digest) not in done.stdout or '"PASS"' not in done.stdout


def test_tmpdir_that_is_not_a_writable_directory_is_refused_before_anything(tmp_path):
    evidence = tmp_path / "ev"
    done = subprocess.run([sys.executable, "-m", "imagekit", "--tmpdir", str(tmp_path / "no"),
                           "verify-mirror", "127.0.0.1:1/a:b", "127.0.0.1:1/a:c",
                           "--evidence-dir", str(evidence)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"imagekit: error: --tmpdir {tmp_path / 'no'}: not a "
                                   "writable directory (imagekit)")
    assert not evidence.exists()
