"""The image phase at scale: on a 63-layer base, each layer blob is fetched
from the registry once — by the build — and never again by what follows it in `images verify`
(the push to staging, the mirror check, the probes, a rebuild).

The base goes through a counting relay of ours (tests/registry/proxy.py, `blob_gets` by digest)
in front of the real staging registry; the real Docker engine (BuildKit) builds FROM it by
digest. One layer is new in every run (random bytes), so at least that one is really pulled
here; the 62 others may already sit in BuildKit's content store from an earlier run, and then
they are fetched zero times — never twice.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from imagekit.oci import ImageReference
from imagekit.oci.digest import Digest
from imagekit.probe.runner import ProbePlan, run_probes
from imagekit.registry import RegistryClient
from imagekit.verify import verify_copy
from tests.registry.images import layer_tar, push_image
from tests.registry.proxy import FaultProxy

pytestmark = [pytest.mark.docker, pytest.mark.registry]
STAGING = "127.0.0.1:5001"
LAYERS = 63


def _base(client: RegistryClient) -> tuple[str, Digest, list[Digest]]:
    """A 63-layer base in staging: 62 small fixed layers and one new one."""
    tars = [layer_tar(6300 + i, 8 << 10) for i in range(LAYERS - 1)]
    tars.append(layer_tar(int.from_bytes(os.urandom(6), "big"), 4 << 10))  # new each run
    repo = "imagekit-test/pull-once"
    image = push_image(client, repo, f"b{uuid.uuid4().hex[:12]}", tars, level=1)
    return repo, image.manifest.digest, image.layer_digests


def test_each_layer_of_a_63_layer_base_is_fetched_once(engine, tmp_path: Path) -> None:
    with RegistryClient(STAGING) as client:
        repo, digest, layers = _base(client)
    with FaultProxy(STAGING) as relay:
        base = f"{relay.address}/{repo}@{digest}"
        (tmp_path / "Dockerfile").write_text(
            "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nLABEL imagekit.test=pull-once\n")
        tag = f"{relay.address}/imagekit-test/pull-once-built:{uuid.uuid4().hex[:12]}"
        built = engine.build(tmp_path, tags=[tag], build_args={"BASE_IMAGE": base})
        assert built.ok, built.log[-2000:]
        after_build = {d: relay.blob_gets[str(d)] for d in layers}
        assert after_build[layers[-1]] == 1, after_build   # the new layer: pulled, once
        assert max(after_build.values()) == 1 and min(after_build.values()) >= 0

        # what images verify does next: push to staging (blobs there: HEADs, no GET), the
        # mirror check (manifests and configs only), the real probes (each a container of the
        # local tag; this base has no python, so they fail, which is not what is counted
        # here), and a rebuild of the same inputs
        engine.push(tag)
        result = verify_copy(ImageReference.parse(base), ImageReference.parse(base))
        assert result.verdict == "identical-content"
        checks, _ = run_probes(engine, tag, ProbePlan(engine="vllm", probes=["pip_check"]))
        assert [c.name for c in checks] == ["pip_check"]
        again = engine.build(tmp_path, tags=[tag], build_args={"BASE_IMAGE": base})
        assert again.ok, again.log[-2000:]
        fetched = {d: relay.blob_gets[str(d)] for d in layers}
    assert fetched == after_build, {str(d.short): n for d, n in fetched.items()
                                    if n != after_build[d]}


def test_the_relay_counts_a_second_fetch(tmp_path: Path) -> None:
    """The counter the test above relies on: a blob read twice is counted twice."""
    with RegistryClient(STAGING) as client:
        repo, digest, layers = _base(client)
    with FaultProxy(STAGING) as relay, RegistryClient(relay.address) as client:
        for _ in range(2):
            client.get_blob_bytes(repo, layers[-1])
        assert relay.blob_gets[str(layers[-1])] == 2


def test_a_container_never_pulls_an_image_that_is_not_local(engine) -> None:
    """Every container imagekit runs (probes, SBOM) starts from the engine's local copy
    (`docker run --pull never`): an image that is only in a registry is not fetched — the run
    fails in the engine's words, and the registry sees no blob GET."""
    with RegistryClient(STAGING) as client:
        repo, digest, layers = _base(client)
    with FaultProxy(STAGING) as relay:
        outcome = engine.run(f"{relay.address}/{repo}@{digest}", ["/bin/true"], timeout=60)
        assert outcome.returncode != 0
        assert "No such image" in outcome.stderr or "not found" in outcome.stderr, \
            outcome.stderr
        assert sum(relay.blob_gets[str(d)] for d in layers) == 0
