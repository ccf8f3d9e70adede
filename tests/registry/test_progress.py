"""Bytes moved in pushes and pulls, seen as a user sees
them from real `imagekit promote` / `verify-copy` processes against the real registries:
on a pipe one line per blob (bytes, seconds) and per phase, and a total; with `--json` the
per-blob figures are in the document and stderr stays empty unless `--verbose`."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest

from imagekit.progress import ProgressEvent
from imagekit.registry.progress import LineProgress, human_bytes

pytestmark = pytest.mark.registry

BLOB_LINE = re.compile(r"^imagekit: \[\s*[0-9.]+s\] \S+ sha256:[0-9a-f]{12}: [0-9.]+ [kMG]?B in "
                       r"[0-9.]+s \([0-9.]+ [kMG]?B/s\)$")


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, **(env or {})})


def _promote(reg, repo, dest: str, tmp_path, *extra: str, env: dict | None = None
             ) -> subprocess.CompletedProcess:
    return cli("promote", f"{reg['staging']}/{repo}:v1", "--to", f"{reg[dest]}/{repo}:v1",
               "--evidence-dir", str(tmp_path), "--force", "--reason", "progress test",
               *extra, env=env)


def test_promote_on_a_pipe_prints_a_line_per_blob_and_phase(reg, repo, staged, tmp_path):
    done = _promote(reg, repo, "production", tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    blob_lines = [line for line in lines if BLOB_LINE.match(line)]
    assert len(blob_lines) == len(staged.layer_digests) + 1, lines  # layers and the config
    for digest in staged.layer_digests:
        assert any(digest.hex[:12] in line for line in blob_lines), (digest, lines)
    assert any("moved (5 copied, 0 skipped, 0 mounted)" in line for line in lines), lines
    assert any(": verified (manifest" in line for line in lines), lines
    assert lines[-1].startswith("imagekit: [") and " total: " in lines[-1]
    # a second run moves nothing and says so; no byte lines
    again = _promote(reg, repo, "production", tmp_path)
    assert again.returncode == 0 and not [x for x in again.stderr.splitlines()
                                          if BLOB_LINE.match(x)], again.stderr


def test_promote_json_carries_bytes_per_blob_and_keeps_stderr_empty(reg, repo, staged,
                                                                     tmp_path):
    done = _promote(reg, repo, "target", tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", done.stderr
    (hop,) = json.loads(done.stdout)["hops"]
    copied = [b for b in hop["blobs"] if b["action"] == "copied"]
    assert len(copied) == 5 and sum(b["bytes_moved"] for b in copied) == hop["bytes_moved"]
    assert all(b["seconds"] > 0 and b["bytes_moved"] == b["size"] for b in copied)
    loud = _promote(reg, repo, "target", tmp_path, "--json", "--verbose")
    # --verbose: the phase lines (here: nothing to move) beside the HTTP log
    assert loud.returncode == 0 and "0 B moved (0 copied, 5 skipped" in loud.stderr, loud.stderr
    assert json.loads(loud.stdout)["hops"][0]["bytes_moved"] == 0


def test_verify_copy_diffids_on_a_pipe_prints_each_layer(reg, repo, staged, tmp_path):
    ref = f"{reg['staging']}/{repo}:v1"
    done = cli("verify-mirror", ref, ref, "--diffids", "--evidence-dir", str(tmp_path))
    assert done.returncode == 0, done.stderr
    layer_lines = [x for x in done.stderr.splitlines() if " layer " in x and " in " in x]
    assert len(layer_lines) == len(staged.layer_digests), done.stderr
    quiet = cli("verify-mirror", ref, ref, "--diffids", "--json", "--evidence-dir", str(tmp_path))
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr


def test_line_progress_counts_what_was_sent():
    out = io.StringIO()
    lines = LineProgress(out)
    task = lines.add("reg sha256:0123456789ab", 3_000_000)
    lines.advance(task, 1_000_000)
    lines.advance(task, 2_000_000)
    lines.finish(task)
    lines.phase("hop x: verified")
    lines.close()
    text = out.getvalue().splitlines()
    assert BLOB_LINE.match(text[0]) and "3.0 MB in" in text[0], text
    assert text[1].endswith("hop x: verified") and "total: 3.0 MB" in text[2]
    assert human_bytes(999) == "999 B" and human_bytes(1_500_000_000) == "1.5 GB"


def test_an_explicit_imagekit_progress_json_gives_progress_events(reg, repo, staged, tmp_path):
    """The rehearsal asks its child steps for JSON events (IMAGEKIT_PROGRESS=json): each blob
    is a phase of step `promote` that ends with its bytes."""
    done = _promote(reg, repo, "production", tmp_path, "--json",
                    env={"IMAGEKIT_PROGRESS": "json"})
    assert done.returncode == 0, done.stderr
    events = [ProgressEvent.parse_line(line) for line in done.stderr.splitlines()]
    assert all(events), done.stderr
    ended = [e for e in events if e.state == "done" and e.phase.endswith(
        tuple(d.hex[:12] for d in staged.layer_digests))]
    assert len(ended) == len(staged.layer_digests) and all(e.step == "promote" for e in ended)
    assert all(" in " in (e.detail or "") and "B" in e.detail for e in ended)
    json.loads(done.stdout)  # stdout stays the one document
