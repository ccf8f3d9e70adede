"""compare_layouts on small OCI layouts made here: equal images, a file whose bytes differ, a
file only one side has, a metadata-only difference, and the same content compressed apart."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from imagekit.build.layout import platform_image
from imagekit.build.reproduce import compare_layouts
from imagekit.errors import DigestMismatch, InvalidInput
from imagekit.oci.digest import Digest

BASE_FILES = {"usr/lib/base.txt": (b"base", 100)}


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, (data, mtime) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), mtime, 0o644
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _blob(root: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}"


def _layout(root: Path, fix: dict[str, tuple[bytes, int]], level: int = 6,
            provenance: bytes | None = None) -> Path:
    layers, diff_ids = [], []
    for files in (BASE_FILES, fix):
        raw = _tar(files)
        packed = gzip.compress(raw, compresslevel=level, mtime=0)
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                       "digest": _blob(root, packed), "size": len(packed)})
        diff_ids.append(f"sha256:{hashlib.sha256(raw).hexdigest()}")
    config = json.dumps({"architecture": "amd64", "os": "linux",
                         "rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": _blob(root, config), "size": len(config)},
        "layers": layers}).encode()
    image = _blob(root, manifest)
    entries = [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": image,
                "size": len(manifest), "platform": {"architecture": "amd64", "os": "linux"}}]
    if provenance is not None:
        statement = _blob(root, provenance)
        attestation = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": _blob(root, b"{}"), "size": 2},
            "layers": [{"mediaType": "application/vnd.in-toto+json", "digest": statement,
                        "size": len(provenance), "annotations": {
                            "in-toto.io/predicate-type": "https://slsa.dev/provenance/v1"}}]
        }).encode()
        entries.append({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": _blob(root, attestation), "size": len(attestation),
                        "platform": {"architecture": "unknown", "os": "unknown"},
                        "annotations": {"vnd.docker.reference.type": "attestation-manifest",
                                        "vnd.docker.reference.digest": image}})
    index = json.dumps({"schemaVersion": 2,
                        "mediaType": "application/vnd.oci.image.index.v1+json",
                        "manifests": entries}).encode()
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": _blob(root, index),
         "size": len(index)}]}))
    return root


FIX = {"usr/lib/fix.py": (b"print(1)", 200), "etc/stamp": (b"same", 200)}


def test_equal_builds_are_equal(tmp_path: Path) -> None:
    diff = compare_layouts(_layout(tmp_path / "a", FIX), _layout(tmp_path / "b", FIX))
    assert diff.equal and diff.layer is None and diff.summary().startswith("both builds gave")


def test_differing_bytes_and_an_extra_file_are_named(tmp_path: Path) -> None:
    other = {**FIX, "etc/stamp": (b"1733500000", 200), "var/log/new.log": (b"x", 200)}
    diff = compare_layouts(_layout(tmp_path / "a", FIX), _layout(tmp_path / "b", other))
    assert not diff.equal and diff.config_fields == ["rootfs"]
    assert diff.layer is not None and diff.layer.index == 1 and not diff.layer.same_content
    found = {m.path: (m.change, m.fields) for m in diff.layer.members}
    assert found == {"etc/stamp": ("content", ["size", "sha256"]),
                     "var/log/new.log": ("only-in-second", [])}
    assert "layer 1 differs in 2 path(s): etc/stamp (content: size, sha256)" in diff.summary()


def test_a_time_alone_is_a_metadata_difference(tmp_path: Path) -> None:
    later = {**FIX, "usr/lib/fix.py": (b"print(1)", 999)}
    diff = compare_layouts(_layout(tmp_path / "a", FIX), _layout(tmp_path / "b", later))
    assert diff.layer is not None
    (member,) = diff.layer.members
    assert (member.path, member.change, member.fields) == ("usr/lib/fix.py", "metadata",
                                                            ["mtime"])


def test_same_content_other_compression_is_named_so(tmp_path: Path) -> None:
    diff = compare_layouts(_layout(tmp_path / "a", FIX, level=1),
                           _layout(tmp_path / "b", FIX, level=9))
    if diff.equal:  # this zlib gave the same bytes at both levels: nothing to show
        pytest.fail("the two compression levels gave the same bytes; pick others")
    assert diff.layer is not None and diff.layer.same_content and diff.layer.members == []
    assert "same content, other compressed bytes" in diff.summary()


def test_the_listing_is_bounded(tmp_path: Path) -> None:
    many = {f"f/{i}": (str(i).encode(), 200) for i in range(30)}
    changed = {f"f/{i}": (str(i + 1).encode(), 200) for i in range(30)}
    diff = compare_layouts(_layout(tmp_path / "a", many), _layout(tmp_path / "b", changed),
                           limit=10)
    assert diff.layer is not None and len(diff.layer.members) == 10 and diff.layer.more == 20


def test_not_a_layout_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no index.json"):
        platform_image(tmp_path)


def test_a_document_that_does_not_hash_to_its_name_is_refused(tmp_path: Path) -> None:
    """The same reader as the provenance's: a config rewritten in place (same name, other
    bytes) is a DigestMismatch, never judged or pushed."""
    root = _layout(tmp_path / "a", FIX)
    image = platform_image(root)
    config = image.blob(Digest.parse(image.manifest["config"]["digest"]))
    config.write_bytes(config.read_bytes().replace(b'"amd64"', b'"arm64"'))
    with pytest.raises(DigestMismatch, match="does not hash to"):
        platform_image(root)
