"""Build test images straight through the registry API: random tar layers, compressed with
gzip (any level), zstd or not at all, a config whose rootfs.diff_ids are the real sha256 of each
uncompressed tar, and a manifest. No docker needed.

A "recompressed copy" is the same tars gzip'ed at another level: different blob digests, the
same diffIDs and the same config digest — the record's mirrored-base situation.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import random
import tarfile
from dataclasses import dataclass, field

import zstandard

from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.registry import ManifestBlob, RegistryClient


def layer_tar(seed: int, size: int) -> bytes:
    """A tar with one file of `size` bytes: half random, half repetitive, so gzip levels
    really produce different bytes and decompression does real work."""
    rng = random.Random(seed)
    half = size // 2
    body = rng.randbytes(half) + (b"imagekit-layer-%d " % seed) * ((size - half) // 20 + 1)
    body = body[:size]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"layer-{seed}/data.bin")
        info.size = len(body)
        info.mtime = 1700000000
        tar.addfile(info, io.BytesIO(body))
    return buffer.getvalue()


def compress(tar: bytes, compression: str, level: int = 6) -> tuple[bytes, str]:
    if compression == "gzip":
        return gzip.compress(tar, compresslevel=level, mtime=0), mt.OCI_LAYER_GZIP
    if compression == "docker-gzip":
        return gzip.compress(tar, compresslevel=level, mtime=0), mt.DOCKER_LAYER_GZIP
    if compression == "zstd":
        return zstandard.ZstdCompressor(level=level).compress(tar), mt.OCI_LAYER_ZSTD
    if compression == "none":
        return tar, mt.OCI_LAYER
    raise ValueError(compression)


@dataclass
class BuiltImage:
    repository: str
    tag: str
    digest: Digest
    manifest: ManifestBlob
    config: bytes
    layer_blobs: list[bytes] = field(repr=False)
    diff_ids: list[Digest] = field(default_factory=list)

    @property
    def config_digest(self) -> Digest:
        return Digest.of_bytes(self.config)

    @property
    def layer_digests(self) -> list[Digest]:
        return [Digest.of_bytes(b) for b in self.layer_blobs]

    @property
    def total_bytes(self) -> int:
        return len(self.config) + sum(len(b) for b in self.layer_blobs)


def config_for(tars: list[bytes], *, architecture: str = "amd64", env: list[str] | None = None
               ) -> bytes:
    diff_ids = [str(Digest.of_bytes(t)) for t in tars]
    config = {
        "architecture": architecture, "os": "linux",
        "config": {"Env": env or ["PATH=/usr/bin"], "Cmd": ["/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created_by": f"layer {i}"} for i in range(len(tars))],
    }
    return json.dumps(config, sort_keys=True).encode()


def push_blob(client: RegistryClient, repository: str, data: bytes) -> Digest:
    digest = Digest.of_bytes(data)
    if not client.blob_exists(repository, digest):
        client.upload_blob(repository, digest, lambda: iter([data]))
    return digest


def push_image(client: RegistryClient, repository: str, tag: str, tars: list[bytes], *,
               compression: str | list[str] = "gzip", level: int = 6,
               config: bytes | None = None, manifest_type: str = mt.OCI_MANIFEST
               ) -> BuiltImage:
    compressions = compression if isinstance(compression, list) else [compression] * len(tars)
    config = config if config is not None else config_for(tars)
    layer_blobs, layers = [], []
    for tar, kind in zip(tars, compressions):
        blob, media_type = compress(tar, kind, level)
        if manifest_type == mt.DOCKER_MANIFEST and media_type == mt.OCI_LAYER_GZIP:
            media_type = mt.DOCKER_LAYER_GZIP
        layer_blobs.append(blob)
        layers.append({"mediaType": media_type, "digest": str(push_blob(client, repository, blob)),
                       "size": len(blob)})
    config_digest = push_blob(client, repository, config)
    config_type = mt.DOCKER_CONFIG if manifest_type == mt.DOCKER_MANIFEST else mt.OCI_CONFIG
    body = {"schemaVersion": 2, "mediaType": manifest_type,
            "config": {"mediaType": config_type, "digest": str(config_digest),
                       "size": len(config)},
            "layers": layers}
    data = json.dumps(body, indent=2).encode()
    manifest = ManifestBlob(data, manifest_type, Digest.of_bytes(data))
    client.put_manifest(repository, tag, manifest)
    return BuiltImage(repository, tag, manifest.digest, manifest, config, layer_blobs,
                      [Digest.of_bytes(t) for t in tars])


def push_index(client: RegistryClient, repository: str, tag: str,
               images: list[tuple[BuiltImage, str, str]], *, attestation: bool = True
               ) -> ManifestBlob:
    """An OCI index over already-pushed images ((image, os, arch) each), plus an
    unknown/unknown attestation entry like buildx writes."""
    entries = []
    for image, os_name, arch in images:
        entries.append({"mediaType": image.manifest.media_type, "digest": str(image.digest),
                        "size": len(image.manifest.data),
                        "platform": {"os": os_name, "architecture": arch}})
    if attestation:
        statement = json.dumps({"_type": "https://in-toto.io/Statement/v0.1",
                                "n": os.urandom(4).hex()}).encode()
        att_config = b"{}"
        layer_digest = push_blob(client, repository, statement)
        config_digest = push_blob(client, repository, att_config)
        att = {"schemaVersion": 2, "mediaType": mt.OCI_MANIFEST,
               "config": {"mediaType": mt.OCI_CONFIG, "digest": str(config_digest), "size": 2},
               "layers": [{"mediaType": "application/vnd.in-toto+json",
                           "digest": str(layer_digest), "size": len(statement)}]}
        att_data = json.dumps(att).encode()
        att_blob = ManifestBlob(att_data, mt.OCI_MANIFEST, Digest.of_bytes(att_data))
        client.put_manifest(repository, att_blob.digest, att_blob)
        entries.append({"mediaType": mt.OCI_MANIFEST, "digest": str(att_blob.digest),
                        "size": len(att_data),
                        "platform": {"os": "unknown", "architecture": "unknown"},
                        "annotations": {mt.REFERENCE_TYPE_ANNOTATION: mt.ATTESTATION_MANIFEST,
                                        "vnd.docker.reference.digest": str(images[0][0].digest)}})
    body = {"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": entries}
    data = json.dumps(body, indent=2).encode()
    index = ManifestBlob(data, mt.OCI_INDEX, Digest.of_bytes(data))
    client.put_manifest(repository, tag, index)
    return index


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
