"""`imagekit promote` (the CLI, as a process) against registries that behave like registries in
the wild: each mode of `behaviours.BehaviourProxy`, in front of the real staging registry.

Every run is judged three ways: the exit status and the one stderr line of a failure; the
destination read back by an independent reader (plain http.client straight to staging, neither
the proxy nor imagekit's client), every manifest and blob hashed against the source; and the
numbers the proxy counted (bytes received for uploads, requests, refusals) and the wall time.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagekit.registry import ClientPool, RegistryOptions

from .behaviours import MANIFEST_TYPES, BehaviourProxy
from .images import BuiltImage, config_for, layer_tar, push_image, push_index
from .settings import FAST_RETRY

pytestmark = pytest.mark.registry
REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
CHUNK = 4 * MIB            # IMAGEKIT_UPLOAD_CHUNK of these runs, unless a mode needs the default
PROMOTE_DEFAULT_CHUNK = 16 * MIB


# -- the source image, built once --------------------------------------------------------------
@dataclass
class Source:
    image: BuiltImage       # at <repository>:v1, about 16 MB, its largest blob over 10 MB
    index_digest: str       # <repository>:multi, linux/amd64 (image) + linux/arm64
    index_blobs: int        # distinct blobs under the index
    index_bytes: int        # their bytes

    @property
    def repository(self) -> str:
        return self.image.repository


@pytest.fixture(scope="module")
def source(infra, reg) -> Source:
    """One image for the whole module (every test only reads it): four gzip-1 layers of
    random-ish data, the largest blob > 10 MB; and an index of two platforms over it."""
    options = RegistryOptions(docker_config=infra.docker_config_dir, retry=FAST_RETRY)
    repository = f"test/behaviours-{uuid.uuid4().hex[:8]}"
    tars = [layer_tar(seed, size) for seed, size in
            ((81, 24_000_000), (82, 6_000_000), (83, 2_000_000), (84, 500_000))]
    arm_tars = [layer_tar(85, 300_000)]
    with ClientPool(options) as pool:
        client = pool.get(reg["staging"])
        image = push_image(client, repository, "v1", tars, compression="gzip", level=1)
        arm = push_image(client, repository, "arm", arm_tars, compression="gzip", level=1,
                         config=config_for(arm_tars, architecture="arm64"))
        index = push_index(client, repository, "multi", [(image, "linux", "amd64"),
                                                         (arm, "linux", "arm64")],
                           attestation=False)
    assert max(map(len, image.layer_blobs)) > 10_000_000
    return Source(image, str(index.digest), len(image.layer_blobs) + 1 + len(arm.layer_blobs) + 1,
                  image.total_bytes + arm.total_bytes)


def push_other(infra, reg, repository: str) -> BuiltImage:
    """A small image that is not the source; pushed anywhere it has the same digest."""
    options = RegistryOptions(docker_config=infra.docker_config_dir, retry=FAST_RETRY)
    with ClientPool(options) as pool:
        return push_image(pool.get(reg["staging"]), repository, "v1", [layer_tar(86, 100_000)],
                          compression="gzip", level=1)


@pytest.fixture(scope="module")
def other(infra, reg) -> BuiltImage:
    return push_other(infra, reg, f"test/behaviours-other-{uuid.uuid4().hex[:8]}")


def fresh(name: str) -> str:
    return f"test/bhv-{name}-{uuid.uuid4().hex[:8]}"


# -- the independent reader ----------------------------------------------------------------------
class Upstream:
    """Reads a plain-HTTP registry with http.client only (not the proxy, not imagekit)."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.host, self.port = host, int(port)

    def _get(self, path: str, accept: str | None = None):
        connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
        connection.request("GET", path, headers={"Accept": accept} if accept else {})
        return connection, connection.getresponse()

    def manifest(self, repository: str, reference: str) -> tuple[int, bytes]:
        connection, response = self._get(f"/v2/{repository}/manifests/{reference}",
                                         ", ".join(MANIFEST_TYPES))
        try:
            return response.status, response.read()
        finally:
            connection.close()

    def blob(self, repository: str, digest: str) -> tuple[int, str, int]:
        """(status, sha256 hex, size) of a blob, hashed as it streams."""
        connection, response = self._get(f"/v2/{repository}/blobs/{digest}")
        try:
            hasher, size = hashlib.sha256(), 0
            while data := response.read(1 << 20):
                hasher.update(data)
                size += len(data)
            return response.status, hasher.hexdigest(), size
        finally:
            connection.close()

    def verify(self, repository: str, reference: str, digest: str) -> tuple[int, int]:
        """The tree under `reference` is byte-identical to `digest`'s: every manifest and
        child manifest hashed, every blob fetched and hashed. (blobs, bytes) checked."""
        status, data = self.manifest(repository, reference)
        assert status == 200, f"{repository}:{reference} is not served (HTTP {status})"
        assert "sha256:" + hashlib.sha256(data).hexdigest() == digest, \
            f"{repository}:{reference} serves other bytes than {digest}"
        document = json.loads(data)
        seen: dict[str, int] = {}
        if "manifests" in document:
            for entry in document["manifests"]:
                blobs, _ = self.verify(repository, entry["digest"], entry["digest"])
                assert blobs > 0
                seen.update(self._blobs(repository, entry["digest"]))
        else:
            for descriptor in [document["config"], *document["layers"]]:
                status, hex_, size = self.blob(repository, descriptor["digest"])
                assert status == 200, f"blob {descriptor['digest']} missing (HTTP {status})"
                assert ("sha256:" + hex_, size) == (descriptor["digest"], descriptor["size"]), \
                    f"blob {descriptor['digest']} serves other bytes"
                seen[descriptor["digest"]] = size
        return len(seen), sum(seen.values())

    def _blobs(self, repository: str, reference: str) -> dict[str, int]:
        _, data = self.manifest(repository, reference)
        document = json.loads(data)
        return {d["digest"]: d["size"] for d in [document["config"], *document["layers"]]}


@pytest.fixture(scope="module")
def upstream(reg) -> Upstream:
    return Upstream(reg["staging"])


def identical(upstream: Upstream, repository: str, tag: str, image: BuiltImage) -> None:
    blobs, size = upstream.verify(repository, tag, str(image.digest))
    assert (blobs, size) == (len(image.layer_blobs) + 1, image.total_bytes)


# -- the CLI -----------------------------------------------------------------------------------
@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def data(self) -> dict:
        assert self.returncode == 0, f"exit {self.returncode}: {self.stderr[-1500:]}"
        return json.loads(self.stdout)

    @property
    def hop(self) -> dict:
        return self.data["hops"][-1]

    def error_line(self) -> str:
        """The failure's one stderr line (and no traceback)."""
        assert "Traceback" not in self.stderr, self.stderr[-3000:]
        lines = self.stderr.strip().splitlines()
        assert len(lines) == 1, f"{len(lines)} stderr lines: {self.stderr[-3000:]}"
        return lines[0]


def promote(src: str, dst: str, infra, tmp_path: Path, *, chunk: int | None = CHUNK,
            timeout: float = 60, **env: str) -> Run:
    """`imagekit promote SRC --to DST --json` as a process. A run still going after `timeout`
    seconds (twice what any case may take: an upload loop) fails the test there."""
    environ = {**os.environ, "DOCKER_CONFIG": str(infra.docker_config_dir),
               "IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence"), **env}
    if chunk is None:
        environ.pop("IMAGEKIT_UPLOAD_CHUNK", None)   # promote's own default (16 MiB)
    else:
        environ["IMAGEKIT_UPLOAD_CHUNK"] = str(chunk)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "imagekit", "promote", src, "--to", dst,
                           "--json", "--force", "--reason", "test"], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return Run(done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def ok(run: Run, proxy: BehaviourProxy | None = None) -> dict:
    assert run.returncode == 0, (f"exit {run.returncode} after {run.seconds:.1f}s: "
                                 f"{run.stderr.strip()[-1500:]}",
                                 proxy.summary() if proxy else None)
    return run.hop


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# -- upload offsets ------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["ecr-stuck-range", "range-backwards"])
def test_a_range_that_lags_what_is_held_still_lands_each_byte_about_once(
        mode, infra, reg, source, upstream, tmp_path):
    """ECR's Range stuck at the first chunk, or a Range running backwards: the registry holds
    every byte sent, so the upload goes on (no resend loop, no 416) and says so in a note."""
    image, dest = source.image, fresh(mode)
    with BehaviourProxy(reg["staging"], mode) as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path)
        hop = ok(run, proxy)
        assert proxy.sent["range-lies"] >= 1, proxy.summary()
        identical(upstream, dest, "v1", image)
        assert proxy.upload_bytes <= 1.1 * image.total_bytes + CHUNK, proxy.summary()
        assert run.seconds < 30, run.seconds
    assert any("Range" in note for note in hop["notes"]), hop["notes"]


def test_stuck_range_leaves_nothing_on_the_client_disk(infra, reg, source, upstream,
                                                       tmp_path):
    """The ECR case again with TMPDIR and the upload journal in fresh folders: a promote that
    met a stuck Range leaves neither spooled bytes nor journal entries behind."""
    image, dest = source.image, fresh("ecr-disk")
    spool, journal = tmp_path / "tmp", tmp_path / "journal"
    spool.mkdir()
    journal.mkdir()
    with BehaviourProxy(reg["staging"], "ecr-stuck-range") as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path, TMPDIR=str(spool), IMAGEKIT_UPLOAD_JOURNAL=str(journal))
        assert du(spool) < MIB and du(journal) < MIB, (du(spool), du(journal))
        ok(run, proxy)
    identical(upstream, dest, "v1", image)


def test_a_registry_that_loses_bytes_fails_bounded_never_passes(infra, reg, source, upstream,
                                                                tmp_path):
    """A Range that claims every byte while half of each PATCH was lost: the commit is refused
    by the registry (digest mismatch). The promote fails, within a byte and time budget."""
    image, dest = source.image, fresh("lose")
    with BehaviourProxy(reg["staging"], "lose-bytes") as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path)
        assert run.returncode != 0 and proxy.sent["lost-bytes"] > 0, proxy.summary()
        assert run.returncode == 1, (run.returncode, run.stderr[-1500:])
        assert run.error_line().startswith("imagekit: error:")
        assert run.seconds < 30, run.seconds
        assert proxy.upload_bytes <= 2 * image.total_bytes, proxy.summary()
    assert upstream.manifest(dest, "v1")[0] == 404


def test_a_registry_that_drops_uploads_meets_the_byte_budget(infra, reg, source, upstream,
                                                            tmp_path):
    """A registry that forgets each upload after two PATCHes: the largest blob (three chunks)
    can never land. Its one restart from byte 0 is given (a registry may cancel an upload once,
    as distribution does after an answer lost on the way back); the second cancel would need
    the blob sent a third time, past size plus one chunk per fault plus that one restart, so
    the byte budget ends the promote: one line naming what the registry did, exit 1, and never
    more than that budget sent for the blob."""
    image, dest = source.image, fresh("drop")
    largest = max(len(b) for b in image.layer_blobs)
    with BehaviourProxy(reg["staging"], "drop-uploads", drop_after=2) as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path)
        assert run.returncode == 1, (run.returncode, run.stderr[-1500:], proxy.summary())
        line = run.error_line()
        assert "byte budget" in line and "upload unknown" in line, line
        assert run.seconds < 20, run.seconds
        assert proxy.sent["404:upload-patch"] >= 1, proxy.summary()
        # what the largest blob cost: its size twice (the one restart) and the two refused
        # chunks, never a third copy
        assert proxy.upload_bytes <= image.total_bytes + largest + 2 * CHUNK, proxy.summary()
        assert proxy.upload_bytes < image.total_bytes + 2 * largest
    assert upstream.manifest(dest, "v1")[0] == 404


def test_a_registry_too_slow_for_the_size_meets_the_upload_deadline(infra, reg, source,
                                                                    tmp_path):
    """Each PATCH answered 1.5 s late with 1 MiB chunks, under a 2 s call deadline: every
    answer comes in time, so only the upload's own deadline (the call deadline plus the size at
    1 MiB/s) can end it; it does, with one line, exit 1, seconds after the bound."""
    dest = fresh("slow")
    largest = max(len(b) for b in source.image.layer_blobs)
    bound = 2 + largest / (1 << 20)
    with BehaviourProxy(reg["staging"], "slow-patches", delay=1.5) as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path, chunk=1 << 20, IMAGEKIT_DEADLINE="2")
        assert run.returncode == 1, (run.returncode, run.stderr[-1500:], proxy.summary())
        assert "deadline" in run.error_line(), run.stderr
        assert run.seconds < bound + 8, (run.seconds, bound)


# -- body size and upload shape ----------------------------------------------------------------
def test_a_body_limit_413_is_met_by_smaller_pieces(infra, reg, source, upstream, tmp_path):
    """nginx's client_max_body_size (10 MB here) under promote's default 16 MiB chunk: the
    largest blob's PATCH is refused 413 and not forwarded; the upload goes on in pieces the
    proxy accepts, and `upload_shape` says why."""
    image, dest = source.image, fresh("413")
    with BehaviourProxy(reg["staging"], "max-body-413") as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path, chunk=None)
        hop = ok(run, proxy)
        assert proxy.sent["413"] >= 1, proxy.summary()
        identical(upstream, dest, "v1", image)
        assert proxy.upload_bytes <= image.total_bytes + 2 * PROMOTE_DEFAULT_CHUNK, \
            proxy.summary()
    shape = hop.get("upload_shape")
    assert isinstance(shape, str) and "413" in shape, hop.get("upload_shape")


def test_no_chunked_uploads_falls_back_to_monolithic(infra, reg, source, upstream, tmp_path):
    """GHCR-like: PATCH refused 405 UNSUPPORTED; each blob then goes in one PUT ?digest=."""
    image, dest = source.image, fresh("mono")
    blobs = len(image.layer_blobs) + 1
    with BehaviourProxy(reg["staging"], "no-chunked-upload") as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path)
        hop = ok(run, proxy)
        identical(upstream, dest, "v1", image)
        # at most one refused chunk per blob was sent before the upload changed shape
        assert proxy.upload_bytes <= image.total_bytes + blobs * CHUNK, proxy.summary()
        assert proxy.by_kind["upload-patch"] <= blobs, proxy.summary()
        assert run.seconds < 30, run.seconds
    shape = hop.get("upload_shape")
    assert isinstance(shape, str) and "monolithic" in shape, hop.get("upload_shape")


# -- cross-repository mounts -------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["mount-202", "mount-401", "mount-lie"])
def test_a_mount_that_does_not_happen_falls_back_to_an_upload(mode, infra, reg, source,
                                                              upstream, tmp_path):
    """Within one registry imagekit mounts; ECR answers 202 (an upload session), Harbor 401
    (a challenge it cannot meet), a liar 201 with nothing mounted. Each blob lands anyway,
    uploaded, and `mount_fallbacks` names the blobs that were."""
    image, dest = source.image, fresh(mode)
    blobs = {str(d) for d in [image.config_digest, *image.layer_digests]}
    with BehaviourProxy(reg["staging"], mode) as proxy:
        run = promote(f"{proxy.address}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path)
        hop = ok(run, proxy)
        assert 1 <= proxy.by_kind["mount"] <= len(blobs), proxy.summary()
        identical(upstream, dest, "v1", image)  # mount-lie: each blob really is there
        assert proxy.upload_bytes <= 1.1 * image.total_bytes + CHUNK, proxy.summary()
        assert run.seconds < 30, run.seconds
    fallbacks = hop.get("mount_fallbacks")
    assert isinstance(fallbacks, list) and fallbacks, hop.get("mount_fallbacks")
    assert set(fallbacks) <= blobs, fallbacks


# -- rate limits -------------------------------------------------------------------------------
def test_every_fifth_request_429_costs_at_most_the_refused_chunks(infra, reg, source, upstream,
                                                                  tmp_path):
    """429 (Retry-After: 0) on every 5th request at the destination: the promote completes;
    the only bytes sent twice are those of bodies the proxy read and refused, and an upload
    answered 429 sends each later body only after `100 Continue`, so it pays for a refused
    body at most once. (Which requests are the 5th depends on how the uploads interleave: a
    first 429 on a PATCH costs its chunk, one on a HEAD costs nothing.)"""
    image, dest = source.image, fresh("429")
    with BehaviourProxy(reg["staging"], "rate-429", every=5, retry_after=0) as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path)
        ok(run, proxy)
        assert proxy.sent["429"] >= 1, proxy.summary()
        identical(upstream, dest, "v1", image)
        assert proxy.unguarded == [], proxy.summary()
        refused = [size for _, size in proxy.refused_bodies]
        assert proxy.upload_bytes <= image.total_bytes + sum(refused), proxy.summary()
        sessions = {session for session, _ in proxy.refused_bodies}
        assert len(sessions) == len(refused) and max(refused, default=0) <= CHUNK, \
            proxy.summary()                          # once per upload, a chunk at most
        assert run.seconds < 30, run.seconds


def test_a_pull_budget_too_small_for_the_index_is_refused_before_any_upload(
        infra, reg, source, upstream, tmp_path):
    """Docker Hub's ratelimit-remaining at the source is 1 and the index needs 3 manifest
    GETs: the promote stops, naming the rate limit, with nothing sent to the destination."""
    dest = fresh("budget")
    with BehaviourProxy(reg["staging"], "rate-429", every=0, remaining=1) as limited, \
            BehaviourProxy(reg["staging"]) as destination:
        run = promote(f"{limited.address}/{source.repository}:multi",
                      f"{destination.address}/{dest}:v1", infra, tmp_path)
        assert run.returncode == 1, (run.returncode, run.stderr[-1500:], limited.summary())
        line = run.error_line()
        assert re.search(r"ratelimit|rate limit|rate-limit", line, re.IGNORECASE), line
        assert destination.upload_bytes == 0, destination.summary()
        assert destination.by_kind["upload-patch"] == destination.by_kind["upload-put"] == 0
        assert run.seconds < 30, run.seconds
    assert upstream.manifest(dest, "v1")[0] == 404


# -- immutable tags ----------------------------------------------------------------------------
@pytest.fixture
def occupied(infra, reg, other) -> str:
    """A destination repository whose tag v1 already names another image (`other`)."""
    repository = fresh("immutable")
    assert push_other(infra, reg, repository).digest == other.digest
    return repository


def registries_file(tmp_path: Path, address: str) -> Path:
    path = tmp_path / "registries.toml"
    path.write_text(f'[registries."{address}"]\nimmutable_tags = true\n')
    return path


def test_an_immutable_tag_known_from_the_registries_file_is_refused_before_any_blob(
        infra, reg, source, occupied, other, upstream, tmp_path):
    with BehaviourProxy(reg["staging"], "immutable-tags") as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1",
                      f"{proxy.address}/{occupied}:v1", infra, tmp_path,
                      IMAGEKIT_REGISTRIES=str(registries_file(tmp_path, proxy.address)))
        assert run.returncode == 1, (run.returncode, run.stderr[-1500:], proxy.summary())
        assert "immutable" in run.error_line().lower(), run.stderr
        assert proxy.upload_bytes == 0, proxy.summary()
        for kind in ("blob-head", "upload-post", "upload-patch", "mount"):
            assert proxy.by_kind[kind] == 0, (kind, proxy.summary())
    identical(upstream, occupied, "v1", other)  # the tag still names what it named


def test_an_immutable_tag_refused_at_the_manifest_put_is_one_line(
        infra, reg, source, occupied, other, upstream, tmp_path):
    with BehaviourProxy(reg["staging"], "immutable-tags") as proxy:
        run = promote(f"{reg['staging']}/{source.repository}:v1",
                      f"{proxy.address}/{occupied}:v1", infra, tmp_path)
        assert run.returncode == 1, (run.returncode, run.stderr[-1500:], proxy.summary())
        assert "immutable" in run.error_line().lower(), run.stderr
        assert proxy.sent["400:manifest-put"] >= 1, proxy.summary()
        assert proxy.upload_bytes <= 1.1 * source.image.total_bytes + CHUNK, proxy.summary()
    identical(upstream, occupied, "v1", other)


def test_the_same_digest_to_an_immutable_tag_again_passes(infra, reg, occupied, other,
                                                          upstream, tmp_path):
    with BehaviourProxy(reg["staging"], "immutable-tags") as proxy:
        run = promote(f"{reg['staging']}/{other.repository}:v1",
                      f"{proxy.address}/{occupied}:v1", infra, tmp_path,
                      IMAGEKIT_REGISTRIES=str(registries_file(tmp_path, proxy.address)))
        hop = ok(run, proxy)
        assert proxy.refusals() == 0 and proxy.upload_bytes == 0, proxy.summary()
    assert hop["digest"] == str(other.digest)
    identical(upstream, occupied, "v1", other)


# -- media types, referrers, framing -----------------------------------------------------------
def test_strict_media_types_both_ends_copy_the_whole_index(infra, reg, source, upstream,
                                                           tmp_path):
    """Source and destination both strict about Accept and Content-Type: the two-platform
    index lands digest-identical, both children with it."""
    dest = fresh("strict")
    with BehaviourProxy(reg["staging"], "strict-media-types") as src, \
            BehaviourProxy(reg["staging"], "strict-media-types") as dst:
        run = promote(f"{src.address}/{source.repository}:multi", f"{dst.address}/{dest}:multi",
                      infra, tmp_path)
        ok(run, dst)
        assert dst.sent["400:manifest-put"] == 0, dst.summary()
        assert dst.by_kind["manifest-put"] >= 3, dst.summary()
        blobs, size = upstream.verify(dest, "multi", source.index_digest)
        assert (blobs, size) == (source.index_blobs, source.index_bytes)
        assert dst.upload_bytes <= 1.1 * source.index_bytes + CHUNK, dst.summary()
    data = run.data
    assert data["digest"] == source.index_digest
    assert data["all_platforms"] is True, data["all_platforms"]


def test_gitlab_referrers_tag_resolving_to_the_subject_is_no_referrer(infra, reg, source,
                                                                      upstream, tmp_path):
    """GitLab: no referrers API, and the tag `sha256-<hex>` serves the subject itself. That is
    not a referrers index: the hop has no referrers, and nothing loops."""
    image, dest = source.image, fresh("gitlab")
    with BehaviourProxy(reg["staging"], "gitlab-referrers-tag") as proxy:
        run = promote(f"{proxy.address}/{source.repository}:v1", f"{proxy.address}/{dest}:v1",
                      infra, tmp_path, timeout=40)
        assert run.seconds < 20, run.seconds
        hop = ok(run, proxy)
        assert proxy.by_kind["referrers"] >= 1, proxy.summary()
        assert proxy.requests_seen < 200, proxy.summary()
    assert hop["referrers"] == []
    identical(upstream, dest, "v1", image)


def test_manifests_sent_chunked_without_content_length(infra, reg, source, upstream, tmp_path):
    """zot: manifest answers in chunked transfer encoding, no Content-Length (the source)."""
    image, dest = source.image, fresh("chunked")
    with BehaviourProxy(reg["staging"], "chunked-manifests") as src, \
            BehaviourProxy(reg["staging"]) as dst:
        run = promote(f"{src.address}/{source.repository}:v1", f"{dst.address}/{dest}:v1",
                      infra, tmp_path)
        ok(run, src)
        assert src.by_kind["manifest-get"] >= 1, src.summary()
        identical(upstream, dest, "v1", image)
        assert dst.upload_bytes <= 1.1 * image.total_bytes, dst.summary()
        assert run.seconds < 30, run.seconds


def test_a_release_checks_every_immutable_tag_before_any_image_moves(infra, reg, source, other,
                                                                    tmp_path):
    """A release of two images to an immutable-tag registry where the first image's tag
    already names another digest: refused before either image sends a blob (the second image,
    whose tag is free, does not start either), one line, exit 1."""
    namespace = fresh("release")
    first = source.repository.rsplit("/", 1)[-1]
    assert push_other(infra, reg, f"{namespace}/{first}").digest == other.digest
    with BehaviourProxy(reg["staging"], "immutable-tags") as proxy:
        environ = {**os.environ, "DOCKER_CONFIG": str(infra.docker_config_dir),
                   "IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence"),
                   "IMAGEKIT_REGISTRIES": str(registries_file(tmp_path, proxy.address))}
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "imagekit", "promote",
             f"{reg['staging']}/{source.repository}:v1", f"{reg['staging']}/{other.repository}:v1",
             "--to", f"{proxy.address}/{namespace}", "--json", "--force", "--reason", "test"],
            cwd=REPO, env=environ, capture_output=True, text=True, timeout=60, check=False)
        run = Run(done.returncode, done.stdout, done.stderr, time.monotonic() - started)
        assert run.returncode == 1, (run.returncode, run.stderr[-1500:], proxy.summary())
        line = run.error_line()
        assert "immutable" in line and f"{namespace}/{first}:v1" in line, line
        assert proxy.upload_bytes == 0, proxy.summary()
        for kind in ("blob-head", "upload-post", "upload-patch", "mount", "manifest-put"):
            assert proxy.by_kind[kind] == 0, (kind, proxy.summary())
