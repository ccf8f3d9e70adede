"""The other direction: what the real `cosign attest` writes (its own Sigstore-bundle
referrer, signed with the project key imported into cosign) is verified by `imagekit verify`."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from imagekit.attest.statements import TEST_RESULT_TYPE
from tests.registry.images import layer_tar, push_image

from .conftest import imagekit

pytestmark = [pytest.mark.registry]


def test_imagekit_verifies_what_cosign_attest_wrote(pool, reg, repo, keypair, peers, tmp_path):
    private, public = keypair
    image = push_image(pool.get(reg["staging"]), repo, "v1", [layer_tar(91, 5000)])
    ref = f"{reg['staging']}/{repo}@{image.digest}"
    env = dict(peers.env, COSIGN_PASSWORD="")  # empty password: a test key, in a 0600 file
    imported = subprocess.run([peers.cosign, "import-key-pair", "--key", str(private)],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=60, check=False)
    assert imported.returncode == 0, imported.stderr
    try:
        predicate = tmp_path / "predicate.json"
        predicate.write_text(json.dumps({"result": "PASSED", "configuration": [],
                                         "passedTests": ["cosign"], "warnedTests": [],
                                         "failedTests": []}))
        attested = subprocess.run(
            [peers.cosign, "attest", "--yes", "--key", str(tmp_path / "import-cosign.key"),
             "--type", TEST_RESULT_TYPE, "--predicate", str(predicate),
             "--use-signing-config=false", "--tlog-upload=false", "--allow-http-registry", ref],
            env=env, capture_output=True, text=True, timeout=120, check=False)
        assert attested.returncode == 0, attested.stderr
    finally:
        (tmp_path / "import-cosign.key").unlink(missing_ok=True)
    done = imagekit("verify-attestations", ref, "--trust-key", str(public), "--require-type", "test-result", "--json",
                    env=dict(os.environ))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [a["type"] for a in report["attestations"]] == [TEST_RESULT_TYPE]
