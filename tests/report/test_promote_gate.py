"""The gate as `imagekit promote` uses it, against the real loopback registries: a digest with a
failing check is not copied; `--force --reason` copies it and records why; the report then names
the digest at every endpoint the promotion verified."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.evidence import EvidenceStore
from imagekit.registry import RegistryClient, RegistryOptions
from imagekit.results import CheckResult, Status
from tests.report.conftest import push_tiny_image

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.registry
def test_promote_is_gated_then_forced_with_reason(infra, tmp_path) -> None:
    staging, production, target = (infra.registries[n].address
                                   for n in ("staging", "production", "target"))
    repository, tag = "imagekit-report-gate", secrets.token_hex(4)
    digest = push_tiny_image(staging, repository, tag)
    store = EvidenceStore(tmp_path / "evidence")
    with store.attempt(digest, "probe") as a:
        a.add_check(CheckResult(name="pip_check", status=Status.PASS))
    with store.attempt(digest, "images-verify") as a:
        a.add_check(CheckResult(name="manifest", status=Status.PASS))
    with store.attempt(digest, "accept-media") as a:
        a.add_check(CheckResult(name="corrupted-media-status", status=Status.FAIL,
                                detail="invalid PNG returned 500, expected 400"))
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(store.root),
           "DOCKER_CONFIG": str(infra.docker_config_dir)}
    argv = [sys.executable, "-m", "imagekit", "promote", f"{staging}/{repository}:{tag}",
            "--via", f"{production}/{repository}:{tag}", "--to", f"{target}/{repository}:{tag}",
            "--insecure", staging, "--ca-file", str(infra.ca_file)]

    refused = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=env,
                             timeout=300)
    assert refused.returncode == 1, refused.stderr
    assert "promotion refused by the gate" in refused.stderr
    assert "corrupted-media-status" in refused.stderr
    options = RegistryOptions(ca_file=infra.ca_file, docker_config=infra.docker_config_dir)
    with RegistryClient(production, options) as client:
        assert client.manifest_exists(repository, tag) is None     # nothing was copied

    forced = subprocess.run([*argv, "--force", "--reason", "known engine issue, record #11"],
                            capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert forced.returncode == 0, forced.stderr
    [override] = store.attempts(digest, "gate-override")
    assert override.context["reason"] == "known engine issue, record #11"
    assert any("corrupted-media-status" in r for r in override.context["refused_for"])

    report = subprocess.run([sys.executable, "-m", "imagekit", "report", str(digest),
                             "--format", "intoto"], capture_output=True, text=True, cwd=REPO,
                            env=env, timeout=120)
    assert report.returncode == 0, report.stderr
    statement = json.loads(report.stdout)
    names = {s["name"]: s["digest"]["sha256"] for s in statement["subject"]}
    assert names == {f"{staging}/{repository}:{tag}": digest.hex,       # the source
                     f"{production}/{repository}:{tag}": digest.hex,
                     f"{target}/{repository}:{tag}": digest.hex}
    assert statement["predicate"]["result"] == "FAILED"         # forcing is not passing
    markdown = subprocess.run([sys.executable, "-m", "imagekit", "report", str(digest)],
                              capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert "## Gate overrides" in markdown.stdout and "known engine issue" in markdown.stdout
