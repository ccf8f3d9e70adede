"""A tiny image with a shell and python3, packed from this machine's own files and pushed to a
loopback registry through imagekit's registry client — so the cluster tests have an image with
python3 (probe runner, ConfigMap controller) without any network or docker.

Deterministic (sorted entries, zero mtimes, fixed gzip header): the same machine yields the
same digest every session, so a second push uploads nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from imagekit.oci import Digest, ImageReference
from imagekit.registry import ManifestBlob, RegistryClient

PY = Path("/usr/lib/python3.11")
SKIP_DIRS = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "pydoc_data",
             "__pycache__", "site-packages", "dist-packages", "config-3.11-x86_64-linux-gnu",
             "unittest", "distutils", "venv", "sqlite3", "curses", "dbm"}
SKIP_SO = re.compile(r"^(_test|_ctypes_test|_curses|_dbm|_sqlite3|readline|nis|ossaudiodev|"
                     r"_tkinter|xx)")
BUSYBOX_APPLETS = ["sh", "sleep", "cat", "echo", "ls", "env", "true", "false", "uname",
                   "dirname", "basename", "test", "["]
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def _ldd(paths: list[Path]) -> set[Path]:
    libs: set[Path] = set()
    for path in paths:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True,
                             check=False).stdout
        for line in out.splitlines():
            match = re.search(r"(/\S+) \(0x", line)
            if match:
                libs.add(Path(match.group(1)))
    return libs


def _add_file(tar: tarfile.TarFile, src: Path, arcname: str, seen: set[str]) -> None:
    arcname = arcname.lstrip("/")
    parts = Path(arcname).parts
    for i in range(1, len(parts)):  # parent directories first
        directory = "/".join(parts[:i])
        if directory not in seen:
            seen.add(directory)
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(info)
    if arcname in seen:
        return
    seen.add(arcname)
    real = src.resolve()
    info = tarfile.TarInfo(arcname)
    info.size, info.mtime = real.stat().st_size, 0
    info.mode = 0o755 if real.stat().st_mode & 0o111 else 0o644
    with open(real, "rb") as handle:
        tar.addfile(info, handle)


def _symlink(tar: tarfile.TarFile, arcname: str, target: str, seen: set[str]) -> None:
    if arcname in seen:
        return
    seen.add(arcname)
    info = tarfile.TarInfo(arcname)
    info.type, info.linkname, info.mtime = tarfile.SYMTYPE, target, 0
    tar.addfile(info)


def build_layer() -> bytes:
    """Uncompressed layer tar: busybox sh + python3.11 + trimmed stdlib + their libraries."""
    files: dict[str, Path] = {"bin/busybox": Path("/bin/busybox"),
                              "usr/bin/python3.11": Path("/usr/bin/python3.11")}
    dynload = []
    for path in sorted(PY.rglob("*")):
        rel = path.relative_to(PY)
        if any(part in SKIP_DIRS for part in rel.parts) or path.is_dir():
            continue
        if rel.parts[0] == "lib-dynload" and SKIP_SO.match(path.name):
            continue
        if path.suffix not in (".py", ".so") and rel.parts[0] != "lib-dynload":
            continue
        files[str(Path("usr/lib/python3.11") / rel)] = path
        if path.suffix == ".so":
            dynload.append(path)
    for lib in sorted(_ldd([Path("/usr/bin/python3.11"), *dynload])):
        files[str(lib).lstrip("/")] = lib
    buffer = io.BytesIO()
    seen: set[str] = set()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(directory)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o1777 if directory == "tmp" \
                else 0o755, 0
            tar.addfile(info)
            seen.add(directory)
        for arcname in sorted(files):
            _add_file(tar, files[arcname], arcname, seen)
        for applet in BUSYBOX_APPLETS:
            _symlink(tar, f"bin/{applet}", "busybox", seen)
        _symlink(tar, "usr/bin/python3", "python3.11", seen)
    return buffer.getvalue()


@dataclass(frozen=True)
class PushedImage:
    reference: ImageReference   # registry/repo:tag
    digest: Digest
    config_digest: Digest

    @property
    def pinned(self) -> ImageReference:
        return self.reference.with_digest(self.digest)


def push_image(client: RegistryClient, registry: str, repository: str, tag: str,
               layer_tar: bytes, label: str = "", indent: int | None = None) -> PushedImage:
    """Push one single-layer image (gzip layer) and return its digests. `indent` re-serialises
    the same manifest (same config and layers, other bytes, other digest)."""
    compressed_io = io.BytesIO()
    with gzip.GzipFile(fileobj=compressed_io, mode="wb", mtime=0, compresslevel=1) as gz:
        gz.write(layer_tar)
    compressed = compressed_io.getvalue()
    diff_id = "sha256:" + hashlib.sha256(layer_tar).hexdigest()
    layer_digest = Digest.of_bytes(compressed)
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["sh"], "WorkingDir": "/",
                   "Labels": {"org.opencontainers.image.title": "imagekit-test-python",
                              "imagekit.test.label": label}},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]}}, sort_keys=True).encode()
    config_digest = Digest.of_bytes(config)
    for digest, data in ((layer_digest, compressed), (config_digest, config)):
        if not client.blob_exists(repository, digest):
            client.upload_blob(repository, digest, lambda data=data: iter([data]))
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": str(config_digest), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": str(layer_digest), "size": len(compressed)}]},
        sort_keys=True, indent=indent).encode()
    digest = Digest.of_bytes(manifest)
    client.put_manifest(repository, tag, ManifestBlob(manifest, OCI_MANIFEST, digest))
    return PushedImage(ImageReference.parse(f"{registry}/{repository}:{tag}"), digest,
                       config_digest)
