"""The stand-in SGLang image after the fix: its signed SBOM (read back through the real
cosign) lists nixl-cu12 1.2.0 and pillow 11.3.0, and the diff against the stand-in base shows
pillow 12.2.0 -> 11.3.0 and nixl-cu12 added. Built the way tests/build builds it (cached)."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from imagekit.attest.statements import SBOM_TYPE
from imagekit.evidence import EvidenceStore
from imagekit.sbom.bom import diff_boms, packages_of
from imagekit.sbom.history import sboms

from .conftest import imagekit

pytestmark = [pytest.mark.docker, pytest.mark.registry]
REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/


@pytest.fixture(scope="module")
def sglang(infra, tmp_path_factory):
    from imagekit.build import build_image
    from imagekit.engine import Engine
    from imagekit.spec import load_spec
    from imagekit.standins import build_standins

    spec = load_spec(ASSETS / "dockerfiles" / "images.toml")
    engine = Engine(binary=str(infra.docker_client))
    store = EvidenceStore(tmp_path_factory.mktemp("sbom-build-evidence"))
    standins = {r.image: r for r in build_standins(spec, engine, store, "local")}
    fixed = build_image(spec, "sglang", engine, store, profile="local")
    return standins["sglang"].reference.with_digest(standins["sglang"].digest), fixed.reference


def test_fixed_sglang_sbom_and_diff_against_the_base(sglang, keypair, peers, tmp_path):
    base, fixed = sglang
    private, public = keypair
    evidence = tmp_path / "evidence"
    env = dict(os.environ, IMAGEKIT_EVIDENCE_DIR=str(evidence))
    for ref in (base, fixed):
        done = imagekit("attest", str(ref), "--key", str(private), "--type", "sbom",
                        env=env)
        assert done.returncode == 0, done.stderr
    run = peers.cosign_verify(str(fixed), public, SBOM_TYPE)
    assert run.returncode == 0, run.stderr[-500:]
    envelope = json.loads(run.stdout.strip().splitlines()[-1])
    bom = json.loads(base64.b64decode(envelope["payload"]))["predicate"]
    packages = packages_of(bom)
    assert packages["pypi/nixl-cu12"] == "1.2.0" and packages["pypi/pillow"] == "11.3.0"
    assert any(p.startswith("deb/") for p in packages)  # dpkg status read too
    store = EvidenceStore(evidence)
    (_, base_bom), = sboms(store, str(base))
    (_, fixed_bom), = sboms(store, str(fixed))
    diff = diff_boms(base_bom, fixed_bom)
    assert "~ pypi/pillow 12.2.0 -> 11.3.0" in diff.lines()
    assert "+ pypi/nixl-cu12 1.2.0" in diff.lines()
    assert not diff.removed
