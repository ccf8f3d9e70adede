"""The digest a tag names is the digest promoted: an index with two platforms (and a buildx
attestation entry) keeps its digest at every hop by default; --platform says why it changed."""

from __future__ import annotations

import json
import os

import pytest

from imagekit.oci.digest import Digest
from tests.registry.images import config_for, layer_tar, push_image, push_index

from .conftest import imagekit

pytestmark = [pytest.mark.registry]


def test_index_promoted_whole_by_default_keeps_its_digest(pool, reg, repo, infra):
    staging = pool.get(reg["staging"])
    amd_tars, arm_tars = [layer_tar(81, 100_000)], [layer_tar(82, 100_000)]
    amd = push_image(staging, repo, "amd", amd_tars, config=config_for(amd_tars))
    arm = push_image(staging, repo, "arm", arm_tars,
                     config=config_for(arm_tars, architecture="arm64"))
    index = push_index(staging, repo, "multi", [(amd, "linux", "amd64"),
                                                (arm, "linux", "arm64")])
    env = dict(os.environ, IMAGEKIT_REQUIRED_CHECKS="promote")
    done = imagekit("promote", f"{reg['staging']}/{repo}:multi",
                    "--via", f"{reg['production']}/{repo}:multi",
                    "--to", f"{reg['target']}/{repo}:multi", "--json", "--force", "--reason",
                    "test image without evidence", env=env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["digest"] == str(index.digest) and result["digest_changed"] is None
    assert [hop["digest"] for hop in result["hops"]] == [str(index.digest)] * 2
    for name in ("production", "target"):
        client = pool.get(reg[name])
        assert client.get_manifest(repo, "multi").digest == index.digest
        for entry in json.loads(index.data)["manifests"]:  # both platforms + attestation
            assert client.manifest_exists(repo, Digest.parse(entry["digest"])) is not None

    done = imagekit("promote", f"{reg['staging']}/{repo}:multi", "--to",
                    f"{reg['production']}/{repo}:amd-only", "--only-platform", "linux/amd64",
                    "--json", "--force", "--reason", "test image without evidence", env=env)
    assert done.returncode == 0, done.stderr
    single = json.loads(done.stdout)
    assert single["digest"] == str(amd.digest) and single["source_digest"] == str(index.digest)
    assert "digest changed" in single["digest_changed"]
    assert "--only-platform linux/amd64" in single["digest_changed"]
