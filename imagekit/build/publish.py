"""A built OCI layout, moved where the rest of imagekit meets it: pushed to staging by the
registry client (so the digest pushed is the digest built, byte for byte) and loaded into the
machine's engine, where the probes run it.

Why not `docker push` from the build engine: rewritten timestamps cannot be stored in its
containerd image store (BuildKit refuses rewrite-timestamp with unpack), so the image exists
only as the layout. Why `docker load`: the machine's engine (20.10) reads a docker-archive; a
layer whose chain it already holds (the base's) is never opened, so those blobs are left out of
the archive instead of being copied again."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import tarfile
import tempfile
import threading
from collections.abc import Callable, Iterator

from imagekit.build.layout import JSON_LIMIT, LayoutImage
from imagekit.engine import Engine
from imagekit.errors import TransportError
from imagekit.oci import mediatypes
from imagekit.oci.digest import Digest
from imagekit.registry import RegistryClient
from imagekit.registry.fetch import ManifestBlob

_CHUNK = 1024 * 1024
LOAD_TIMEOUT_S = 900.0


def push_layout(client: RegistryClient, repository: str, tag: str, image: LayoutImage,
                mount_from: str | None = None,
                on_note: Callable[[str], None] | None = None) -> Digest:
    """Config and layers (each skipped when there, mounted from `mount_from` when it has it,
    else uploaded from the layout), then the manifest under `tag`. Returns the digest the
    registry answered, which must be the layout's."""
    blobs = [Digest.parse(image.manifest["config"]["digest"]), *image.layers]
    for digest in blobs:
        if client.blob_exists(repository, digest):
            continue
        session = None
        if mount_from is not None and mount_from != repository:
            mount = client.mount_blob(repository, digest, mount_from, on_note)
            if mount.mounted:
                continue
            session = mount.session
        path = image.blob(digest)

        def source(path=path) -> Iterator[bytes]:  # noqa: ANN001 - bound per blob
            with path.open("rb") as stream:
                while chunk := stream.read(_CHUNK):
                    yield chunk

        client.upload_blob(repository, digest, source, size=path.stat().st_size,
                           on_note=on_note, session=session)
    data = image.blob(image.digest).read_bytes()
    media_type = image.manifest.get("mediaType", mediatypes.OCI_MANIFEST)
    pushed = client.put_manifest(repository, tag, ManifestBlob(data, media_type, image.digest))
    if pushed != image.digest:
        raise TransportError(f"the registry stored {pushed} for the manifest {image.digest}",
                             where=f"{client.registry}/{repository}:{tag}")
    return pushed


def load_layout(engine: Engine, image: LayoutImage, tag: str,
                held_diff_ids: list[str] | None = None) -> Digest:
    """Load the image into `engine` under `tag` (a docker-archive streamed to `docker load`);
    the leading layers whose diffIDs equal `held_diff_ids` (the base, already in the engine)
    are left out. Returns the image ID (the config digest)."""
    config = Digest.parse(image.manifest["config"]["digest"])
    held = held_diff_ids or []
    skip = 0
    while skip < min(len(held), len(image.diff_ids)) and held[skip] == image.diff_ids[skip]:
        skip += 1
    names = [f"blobs/{d.algorithm}/{d.hex}" for d in image.layers]
    manifest = json.dumps([{"Config": f"blobs/{config.algorithm}/{config.hex}",
                            "RepoTags": [tag], "Layers": names}]).encode()
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(engine.argv("load"), stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=errors)
        watchdog = threading.Timer(LOAD_TIMEOUT_S, process.kill)  # a load that hangs ends
        watchdog.start()
        failure = None
        try:
            with tarfile.open(fileobj=process.stdin, mode="w|") as archive:
                _add_bytes(archive, "manifest.json", manifest)
                archive.add(image.blob(config), arcname=f"blobs/{config.algorithm}/{config.hex}")
                for index, (digest, name) in enumerate(zip(image.layers, names, strict=True)):
                    if index >= skip:
                        archive.add(image.blob(digest), arcname=name)
        except (OSError, tarfile.TarError) as exc:  # docker load stopped reading
            failure = exc
        finally:
            if process.stdin is not None:
                with contextlib.suppress(OSError):  # docker load may have gone already
                    process.stdin.close()
            code = process.wait()
            watchdog.cancel()
        errors.seek(0)
        lines = [line for line in errors.read().decode(errors="replace").splitlines()
                 if line.strip()]
    if code != 0:
        raise TransportError(f"docker load failed (exit {code}): "
                             f"{lines[-1] if lines else 'no message'}", where=tag)
    if failure is not None:
        raise TransportError(f"docker load stopped reading the image: {failure}", where=tag)
    found = engine.inspect(tag).id
    if found != config:
        raise TransportError(f"the engine holds {found} under {tag}, not the built {config}",
                             where=tag)
    return found


def _add_bytes(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    if len(data) > JSON_LIMIT:
        raise ValueError(f"{name} is larger than {JSON_LIMIT} bytes")
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))
