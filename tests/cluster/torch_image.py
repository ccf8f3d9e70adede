"""A CPU torch image for the many-Pod preflight test, packed from this machine's own files:
layer 1 is `images.build_layer()` (busybox sh + Debian's python3.11, the same blob as the other
cluster tests' image), layer 2 adds the stdlib parts torch needs (unittest) and torch itself
from the test venv (`/opt/torch`, on PYTHONPATH) — the same torch the host-side preflight tests
run (tests/gpu), so a Pod computes with exactly what those tests trust.

The torch layer (~450 MB of shared libraries) is built once per machine and cached by content
key (torch version + file list with sizes and mtimes) under /var/cache/imagekit-tests; pushes
skip blobs the registry already has.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

import torch

from imagekit.oci import Digest
from imagekit.registry import ManifestBlob, RegistryClient

from .images import OCI_MANIFEST, PushedImage, _ldd, build_layer

CACHE = Path(os.environ.get("IMAGEKIT_TEST_CACHE", "/var/cache/imagekit-tests"))
SITE = Path(torch.__file__).parent.parent
PACKAGES = ("torch", "torchgen", "typing_extensions.py", "pynvml.py")
SKIP = {"include", "__pycache__", "test"}
STDLIB_EXTRA = (Path("/usr/lib/python3.11/unittest"),)
CHUNK = 1 << 20


def _files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for name in PACKAGES:
        top = SITE / name
        if top.is_file():
            files[f"opt/torch/{name}"] = top
            continue
        for path in sorted(top.rglob("*")):
            rel = path.relative_to(SITE)
            if path.is_dir() or any(part in SKIP for part in rel.parts) or path.suffix == ".a":
                continue
            files[f"opt/torch/{rel}"] = path
    for directory in STDLIB_EXTRA:
        for path in sorted(directory.rglob("*.py")):
            if "__pycache__" not in path.parts:
                files[str(path).lstrip("/")] = path
    libs = [p for p in files.values() if p.suffix == ".so" or ".so." in p.name]
    for lib in sorted(_ldd(libs)):
        if not str(lib).startswith(str(SITE)):
            files.setdefault(str(lib).lstrip("/"), lib)
    return files


def _key(files: dict[str, Path]) -> str:
    digest = hashlib.sha256(torch.__version__.encode())
    for arcname, path in sorted(files.items()):
        st = path.stat()
        digest.update(f"{arcname}\0{st.st_size}\0{int(st.st_mtime)}\n".encode())
    return digest.hexdigest()[:20]


def torch_layer() -> tuple[Path, str, Digest, int]:
    """(compressed layer file, diff_id, blob digest, size), built once and cached."""
    from .images import _add_file

    files = _files()
    directory = CACHE / f"torch-layer-{_key(files)}"
    meta = directory / "meta.json"
    if meta.is_file():
        m = json.loads(meta.read_text())
        return directory / "layer.tar.gz", m["diff_id"], Digest.parse(m["digest"]), m["size"]
    directory.mkdir(parents=True, exist_ok=True)
    raw, blob = directory / "layer.tar.tmp", directory / "layer.tar.gz.tmp"
    seen: set[str] = set()
    with open(raw, "wb") as handle, tarfile.open(fileobj=handle, mode="w",
                                                 format=tarfile.PAX_FORMAT) as tar:
        for arcname in sorted(files):
            _add_file(tar, files[arcname], arcname, seen)
    diff = hashlib.sha256()
    with open(raw, "rb") as src, open(blob, "wb") as out, \
            gzip.GzipFile(fileobj=out, mode="wb", mtime=0, compresslevel=1) as gz:
        while chunk := src.read(CHUNK):
            diff.update(chunk)
            gz.write(chunk)
    raw.unlink()
    compressed = hashlib.sha256()
    with open(blob, "rb") as handle:
        while chunk := handle.read(CHUNK):
            compressed.update(chunk)
    final = directory / "layer.tar.gz"
    blob.replace(final)
    size = final.stat().st_size
    digest = Digest.parse("sha256:" + compressed.hexdigest())
    meta.write_text(json.dumps({"diff_id": "sha256:" + diff.hexdigest(), "digest": str(digest),
                                "size": size}))
    return final, "sha256:" + diff.hexdigest(), digest, size


def _gz(data: bytes) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=1) as gz:
        gz.write(data)
    return buffer.getvalue()


def push_torch_image(client: RegistryClient, registry: str, repository: str, tag: str,
                     python_layer: bytes | None = None) -> PushedImage:
    python_tar = python_layer if python_layer is not None else build_layer()
    python_gz = _gz(python_tar)
    python_digest = Digest.of_bytes(python_gz)
    torch_file, torch_diff, torch_digest, torch_size = torch_layer()

    def stream():
        with open(torch_file, "rb") as handle:
            while chunk := handle.read(CHUNK):
                yield chunk

    if not client.blob_exists(repository, python_digest):
        client.upload_blob(repository, python_digest, lambda: iter([python_gz]))
    if not client.blob_exists(repository, torch_digest):
        client.upload_blob(repository, torch_digest, stream, size=torch_size)
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/usr/bin:/bin", "PYTHONPATH=/opt/torch"], "Cmd": ["sh"],
                   "WorkingDir": "/",
                   "Labels": {"org.opencontainers.image.title": "imagekit-test-torch",
                              "imagekit.test.torch": torch.__version__}},
        "rootfs": {"type": "layers", "diff_ids": [
            "sha256:" + hashlib.sha256(python_tar).hexdigest(), torch_diff]}},
        sort_keys=True).encode()
    config_digest = Digest.of_bytes(config)
    if not client.blob_exists(repository, config_digest):
        client.upload_blob(repository, config_digest, lambda: iter([config]))
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": str(config_digest), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": str(python_digest), "size": len(python_gz)},
                   {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": str(torch_digest), "size": torch_size}]},
        sort_keys=True).encode()
    digest = Digest.of_bytes(manifest)
    client.put_manifest(repository, tag, ManifestBlob(manifest, OCI_MANIFEST, digest))
    from imagekit.oci import ImageReference
    return PushedImage(ImageReference.parse(f"{registry}/{repository}:{tag}"), digest,
                       config_digest)
