"""`imagekit promote SRC SRC ... --via REG[/NS] --to REG[/NS]`: a release promoted at once, over
the real registries (staging -> referrers-API registry -> production Basic -> target Bearer),
each image gated, read back and signed on its own, one summary; bad input refused before any
copy; shared blobs moved once per repository, mounted where the registry allows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from imagekit.evidence import EvidenceStore, kinds
from imagekit.oci import ImageReference
from imagekit.oci.digest import Digest
from imagekit.promote.release import ReleaseImage, run_release
from imagekit.registry import ClientPool
from imagekit.results import CheckResult, Status

from .images import layer_tar, push_image
from .proxy import FaultProxy

pytestmark = pytest.mark.registry
REPO = Path(__file__).resolve().parents[2]


def R(text: str) -> ImageReference:
    return ImageReference.parse(text)


def ik(*args: str, evidence: Path, docker_config: Path, **extra: str
       ) -> subprocess.CompletedProcess:
    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(evidence),
           "DOCKER_CONFIG": str(docker_config), "IMAGEKIT_REQUIRED_CHECKS": "probe",
           "IMAGEKIT_REQUIRED_LINKS": "hops", **extra}
    return subprocess.run([sys.executable, "-m", "imagekit", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="module")
def shared_tars() -> list[bytes]:
    """Two layers both images share (one base), then one layer of each image's own."""
    return [layer_tar(91, 1_500_000), layer_tar(92, 700_000)]


@pytest.fixture
def release(pool, reg, shared_tars):
    """Two images at staging under one namespace: `<ns>/vllm:v1` and `<ns>/sglang:v2`."""
    ns = f"rel/{uuid.uuid4().hex[:10]}"
    staging = pool.get(reg["staging"])
    vllm = push_image(staging, f"{ns}/vllm", "v1", [*shared_tars, layer_tar(93, 900_000)])
    sglang = push_image(staging, f"{ns}/sglang", "v2", [*shared_tars, layer_tar(94, 800_000)])
    return {"ns": ns, "vllm": vllm, "sglang": sglang,
            "refs": [f"{reg['staging']}/{ns}/vllm:v1", f"{reg['staging']}/{ns}/sglang:v2"]}


def _allow(store: EvidenceStore, *digests) -> None:
    """The evidence the gate asks for ($IMAGEKIT_REQUIRED_CHECKS=probe), PASS."""
    for digest in digests:
        with store.attempt(digest, "probe") as attempt:
            attempt.write_result(kinds.ProbeResult(image=str(digest)))
            attempt.add_check(CheckResult(name="pip_check", status=Status.PASS))


def test_two_sources_through_every_registry_land_verified_and_signed(infra, reg, release,
                                                                    pool, tmp_path):
    from imagekit.attest import keys

    private, _ = keys.generate(tmp_path / "keys")
    evidence = tmp_path / "evidence"
    store = EvidenceStore(evidence)
    _allow(store, release["vllm"].digest, release["sglang"].digest)
    out = f"out/{uuid.uuid4().hex[:8]}"
    done = ik("promote", *release["refs"], "--via", f"{reg['referrers']}/{out}", "--via",
              f"{reg['production']}/{out}", "--to", f"{reg['target']}/{out}", "--key",
              str(private), "--json", evidence=evidence, docker_config=infra.docker_config_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "PASS" and data["exit_code"] == 0
    images = {i["given"]: i for i in data["images"]}
    for name, tag in (("vllm", "v1"), ("sglang", "v2")):
        image = images[f"{reg['staging']}/{release['ns']}/{name}:{tag}"]
        digest = release[name].digest
        assert image["status"] == "PASS" and image["digest"] == str(digest)
        assert [h["endpoint"] for h in image["result"]["hops"]] == [
            f"{reg[r]}/{out}/{name}:{tag}" for r in ("referrers", "production", "target")]
        assert all(h["verified"] for h in image["result"]["hops"])
        assert len(image["attestations"]) == 3  # the promotion chain, at every endpoint
        for r in ("referrers", "production", "target"):  # read here, independently, hashed
            assert pool.get(reg[r]).get_manifest(f"{out}/{name}", tag).digest == digest
        (record,) = store.attempts(digest, "promote")
        assert record.status is Status.PASS
    (summary,) = store.attempts("promote-release", "promote-release")
    result = store.result(summary)
    assert isinstance(result, kinds.ReleaseResult) and result.status is Status.PASS
    assert sorted(line.destination for line in result.images) == [
        f"{reg['target']}/{out}/sglang:v2", f"{reg['target']}/{out}/vllm:v1"]
    assert data["evidence"] == str(store.path_of(summary))


def test_a_refused_image_is_named_the_other_lands_exit_1(infra, reg, release, pool, tmp_path):
    evidence = tmp_path / "evidence"
    store = EvidenceStore(evidence)
    _allow(store, release["vllm"].digest)  # sglang has no evidence: the gate refuses it
    out = f"out/{uuid.uuid4().hex[:8]}"
    done = ik("promote", *release["refs"], "--to", f"{reg['production']}/{out}",
              evidence=evidence, docker_config=infra.docker_config_dir)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "promoted 1 of 2 image(s)" in done.stdout
    # one progress view: every line names its image
    assert f"vllm: hop {reg['production']}/{out}/vllm:v1: verified" in done.stderr, done.stderr
    refused = [line for line in done.stdout.splitlines() if "sglang" in line]
    assert refused and refused[0].strip().startswith("FAIL"), done.stdout
    assert "refused by the gate" in refused[0], done.stdout
    assert pool.get(reg["production"]).get_manifest(f"{out}/vllm", "v1").digest == \
        release["vllm"].digest
    assert pool.get(reg["production"]).manifest_exists(f"{out}/sglang", "v2") is None
    (summary,) = store.attempts("promote-release", "promote-release")
    lines = {line.given.rsplit("/", 1)[-1]: line for line in store.result(summary).images}
    assert lines["vllm:v1"].status is Status.PASS and lines["sglang:v2"].status is Status.FAIL
    assert summary.status is Status.FAIL


def test_fail_fast_stops_the_rest_and_records_nothing_half_copied(options, reg, pool,
                                                                  tmp_path):
    """Three images, one worker: the first is refused by its gate, the others never start;
    nothing is copied and no promote attempt says PASS."""
    ns = f"rel/{uuid.uuid4().hex[:10]}"
    staging = pool.get(reg["staging"])
    built = [push_image(staging, f"{ns}/img{i}", "v1", [layer_tar(100 + i, 400_000)])
             for i in range(3)]
    store = EvidenceStore(tmp_path)
    from imagekit.errors import CheckFailed

    def refuse(store, digest, **_):
        raise CheckFailed(f"gate refused {digest.short}: required check probe missing")

    def allow(store, digest, **_):
        return kinds.GateDecision(digest=str(digest), allowed=True)

    out = f"out/{uuid.uuid4().hex[:8]}"
    images = [ReleaseImage(given=f"img{i}", source=R(f"{reg['staging']}/{ns}/img{i}:v1"),
                           via=[], to=R(f"{reg['production']}/{out}/img{i}:v1"),
                           gate=refuse if i == 0 else allow) for i in range(3)]
    outcome = run_release(images, store=store, options=options, fail_fast=True, image_jobs=1)
    assert outcome.exit_code == 1 and outcome.status is Status.FAIL
    first, *rest = outcome.images
    assert first.status is Status.FAIL and "probe missing" in (first.error or "")
    assert all("--fail-fast" in (o.error or "") and o.status is not Status.PASS for o in rest)
    production = pool.get(reg["production"])
    for i, image in enumerate(built):
        assert production.manifest_exists(f"{out}/img{i}", "v1") is None
        assert all(r.status is not Status.PASS for r in store.attempts(image.digest, "promote"))


@pytest.mark.parametrize("case", ["same-destination", "full-to", "empty", "unknown-name"])
def test_bad_input_is_one_line_exit_2_before_any_copy(case, infra, reg, release, pool,
                                                      tmp_path):
    out = f"out/{uuid.uuid4().hex[:8]}"
    refs = release["refs"]
    args = {
        # two different repositories of the same last component and tag
        "same-destination": [refs[0], f"{reg['staging']}/{release['ns']}-other/vllm:v1",
                             "--to", f"{reg['production']}/{out}"],
        "full-to": [*refs, "--to", f"{reg['production']}/{out}/app:v1"],
        "empty": ["--to", f"{reg['production']}/{out}"],
        "unknown-name": [*refs, "no-such-image", "--to", f"{reg['production']}/{out}"],
    }[case]
    if case == "same-destination":
        push_image(pool.get(reg["staging"]), f"{release['ns']}-other/vllm", "v1",
                   [layer_tar(95, 300_000)])
    done = ik("promote", *args, "--force", "--reason", "bad input test",
              evidence=tmp_path, docker_config=infra.docker_config_dir)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: "), done.stderr
    assert "Traceback" not in done.stderr
    expected = {"same-destination": "would both land at", "full-to": "names one image",
                "empty": "at least one SRC", "unknown-name": "no-such-image"}[case]
    assert expected in lines[0]
    production = pool.get(reg["production"])
    assert not any(_exists(production, out, name) for name in ("vllm", "sglang", "app"))
    assert not list(tmp_path.rglob("attempt.json"))  # nothing recorded: nothing began


def _exists(client, out: str, name: str) -> bool:
    return bool(client.list_tags(f"{out}/{name}"))


def _blobs(image) -> set:
    return {Digest.of_bytes(b) for b in [*image.layer_blobs, image.config]}


def test_shared_blobs_upload_once_per_repository_and_mount_on_one_registry(options, reg, release,
                                                                           tmp_path):
    """Through a relay that counts: each blob the two images share is uploaded to the
    destination once (then mounted into the other repository), never twice."""
    vllm, sglang = release["vllm"], release["sglang"]
    shared = _blobs(vllm) & _blobs(sglang)
    assert len(shared) == 2  # the two base layers (configs differ: their diffIDs do)
    with FaultProxy(reg["staging"]) as relay, ClientPool(options) as pool:
        out = f"out/{uuid.uuid4().hex[:8]}"
        images = [ReleaseImage(given=name, source=R(f"{reg['staging']}/{release['ns']}/"
                                                   f"{name}:{tag}"),
                               via=[], to=R(f"{relay.address}/{out}/{name}:{tag}"), gate=False)
                  for name, tag in (("vllm", "v1"), ("sglang", "v2"))]
        outcome = run_release(images, store=EvidenceStore(tmp_path), options=options)
        assert outcome.exit_code == 0, outcome
        assert {o.status for o in outcome.images} == {Status.PASS}
        for digest in shared:
            assert relay.uploads[str(digest)] == 1, (digest, relay.uploads)
            assert relay.mounts[str(digest)] == 1, (digest, relay.mounts)
        for image in (vllm, sglang):
            for digest in _blobs(image) - shared:
                assert relay.uploads[str(digest)] == 1 and relay.mounts[str(digest)] == 0
        # both repositories serve every blob (the read-back said so; asked again here)
        client = pool.get(relay.address)
        for name, image in (("vllm", vllm), ("sglang", sglang)):
            for digest in _blobs(image):
                assert client.blob_exists(f"{out}/{name}", digest)


def test_same_registry_release_mounts_from_the_source(options, reg, release, tmp_path):
    """Source and destination on one registry: every blob is mounted, 0 bytes uploaded."""
    out = f"out/{uuid.uuid4().hex[:8]}"
    images = [ReleaseImage(given=name, source=R(f"{reg['staging']}/{release['ns']}/{name}:{tag}"),
                           via=[], to=R(f"{reg['staging']}/{out}/{name}:{tag}"), gate=False)
              for name, tag in (("vllm", "v1"), ("sglang", "v2"))]
    outcome = run_release(images, store=EvidenceStore(tmp_path), options=options)
    assert outcome.exit_code == 0
    for image in outcome.images:
        (hop,) = image.result.hops
        assert hop.bytes_moved == 0 and hop.blobs_copied == 0 and hop.blobs_mounted == 4


def test_two_images_at_once_through_a_cutting_relay_pass_with_no_byte_sent_twice(
        options, reg, pool, tmp_path):
    """Both sources read through a relay that cuts every blob download: both PASS, each cut
    resumed, and the relay sent the release's bytes once (a shared layer is read once: the
    second image mounts it at the destination) plus at most one relay write per cut."""
    ns = f"rel/{uuid.uuid4().hex[:10]}"
    staging = pool.get(reg["staging"])
    base = [layer_tar(111, 3_000_000), layer_tar(112, 2_000_000)]
    images = {name: push_image(staging, f"{ns}/{name}", "v1", [*base, layer_tar(seed, 2_500_000)])
              for name, seed in (("vllm", 113), ("sglang", 114))}
    unique = {d: len(b) for image in images.values()
              for d, b in zip([Digest.of_bytes(b) for b in [*image.layer_blobs, image.config]],
                              [*image.layer_blobs, image.config], strict=True)}
    total = sum(unique.values())
    out = f"out/{uuid.uuid4().hex[:8]}"
    with FaultProxy(reg["staging"], cut_blobs=(256 << 10, 768 << 10)) as relay:
        outcome = run_release(
            [ReleaseImage(given=name, source=R(f"{relay.address}/{ns}/{name}:v1"), via=[],
                          to=R(f"{reg['production']}/{out}/{name}:v1"), gate=False)
             for name in images], store=EvidenceStore(tmp_path), options=options)
        stats = dict(relay.stats)
    assert [o.status for o in outcome.images] == [Status.PASS, Status.PASS], outcome
    cuts = stats.get("cut-blob", 0)
    assert cuts >= 5, stats  # every big blob was cut at least once
    assert total <= stats["blob_bytes"] <= total + cuts * (256 << 10), (stats, total)
    print(f"release through the cutting relay: {total} bytes, {cuts} cuts, relay sent "
          f"{stats['blob_bytes'] / total:.4f}x")
    for name, image in images.items():
        assert pool.get(reg["production"]).get_manifest(f"{out}/{name}", "v1").digest == \
            image.digest
