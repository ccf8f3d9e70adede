"""CLI contract: bad input is one line on stderr and exit 2; --json is one JSON document."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from imagekit.evidence import EvidenceStore
from imagekit.results import CheckResult, Status


def run_cli(*args: str, env_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, env={"IMAGEKIT_EVIDENCE_DIR": str(env_dir),
                                          "PATH": "/usr/bin:/bin"}, timeout=60)


def test_bad_evidence_key_is_one_line_exit_2(tmp_path: Path) -> None:
    result = run_cli("evidence", "list", "sha256:nothex", env_dir=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: ")
    assert "Traceback" not in result.stderr


def test_evidence_list_json_lists_attempts(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    digest = "sha256:" + "d" * 64
    with store.attempt(digest, "probe") as attempt:
        attempt.add_check(CheckResult(name="pip_check", status=Status.PASS))
    result = run_cli("evidence", "list", digest, "--json", env_dir=tmp_path)
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert [a["status"] for a in body["attempts"]] == ["PASS"]
    assert body["attempts"][0]["kind"] == "probe"
