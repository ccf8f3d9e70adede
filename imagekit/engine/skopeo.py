"""Pushing an image of the docker engine with skopeo instead of `docker push`.

Why: the machine's dockerd (20.10) compresses every layer it pushes with Go's gzip on one core.
skopeo reads the same image from the daemon (`docker-daemon:`) and compresses with pgzip on
every core: measured on the 2-core VM, alone, the 3.7 GB vLLM stand-in took 84.5 s with
`docker push` and 45.6 s with `skopeo copy` (gzip, default level); skopeo's own zstd was no
faster there (41.9 s). The image stays a Docker v2 schema 2 manifest of gzip layers, as
`docker push` writes it.

The daemon's image is read whole by every copy (`docker save`, about 25 s for that image), so
`push` first asks the registry: when the tag already names a manifest of this image's config
(the image ID), nothing is read or sent.

Trust is the engine's own: a loopback registry (`imagekit.registry.endpoint.is_loopback`) is
one the daemon reaches without TLS verification (dockerd's default insecure range is
127.0.0.0/8), any other is verified, with the CA in /etc/docker/certs.d/<registry>/ where docker
keeps it; credentials come from the engine's docker config file (a path, never argv).
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit.errors import TransportError
from imagekit.oci import Digest, ImageReference
from imagekit.progress import current as current_progress
from imagekit.registry.credentials import docker_config_dir
from imagekit.registry.endpoint import is_loopback

#: the daemon's CA directory per registry (what `docker push` trusts)
CERTS_D = Path("/etc/docker/certs.d")
#: one copy of a multi-GB stand-in, bounded in time; a registry that stalls fails the push
COPY_TIMEOUT_S = 1200.0
INSPECT_TIMEOUT_S = 60.0


class Pushed(BaseModel):
    """What `push` did: the registry's manifest digest for the tag, and whether anything was
    sent (False: the tag already named this image)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: Digest
    sent: bool


def trust_args(registry: str, side: str | None, config_dir: Path | None = None,
               certs_d: Path = CERTS_D) -> list[str]:
    """skopeo's options for `registry`, trusted as the docker engine trusts it: for one side
    (`src`/`dest`) of a copy, or (None) for `skopeo inspect`."""
    flag = f"--{side}-" if side else "--"
    args: list[str] = []
    if is_loopback(registry):
        args.append(f"{flag}tls-verify=false")
    elif (certs_d / registry).is_dir():
        args += [f"{flag}cert-dir", str(certs_d / registry)]
    auth = auth_file(config_dir)
    if auth is not None:
        args += [f"{flag}authfile", str(auth)]
    return args


def auth_file(config_dir: Path | None = None) -> Path | None:
    """The docker config file the engine's pushes use (`config_dir`, else $DOCKER_CONFIG, else
    ~/.docker: `docker_config_dir`); None when there is none."""
    path = docker_config_dir(config_dir) / "config.json"
    return path if path.is_file() else None


def _skopeo(argv: list[str], timeout_s: float, where: str) -> subprocess.CompletedProcess[bytes]:
    """skopeo's output as bytes (a raw manifest is hashed as it came)."""
    try:
        done = subprocess.run(["skopeo", *argv], capture_output=True, timeout=timeout_s,
                              check=False)
    except FileNotFoundError:
        raise TransportError("skopeo is not installed (Debian's `skopeo` package)",
                             where=where) from None
    except subprocess.TimeoutExpired:
        raise TransportError(f"skopeo {argv[0]} took over {timeout_s:.0f} s",
                             where=where) from None
    return done


def _copy(options: list[str], source: str, target: ImageReference, phase: str) -> Digest:
    """`skopeo copy` of `source` to `target` (bounded by COPY_TIMEOUT_S, two retries): the
    manifest digest the registry holds for `target`; TransportError with skopeo's last line."""
    with tempfile.TemporaryDirectory(prefix="imagekit-skopeo-") as tmp:
        digest_file = Path(tmp) / "digest"
        argv = ["copy", "--quiet", "--retry-times", "2", "--digestfile", str(digest_file),
                *options, source, f"docker://{target}"]
        with current_progress().phase(phase, str(target)):
            done = _skopeo(argv, COPY_TIMEOUT_S, str(target))
        if done.returncode != 0:
            lines = done.stderr.decode(errors="replace").strip().splitlines()
            raise TransportError(f"skopeo copy failed: {(lines or ['no output'])[-1][:300]}",
                                 where=str(target))
        return Digest.parse(digest_file.read_text().strip())


def config_in_registry(reference: ImageReference, config_dir: Path | None = None
                       ) -> tuple[Digest, Digest] | None:
    """(manifest digest, config digest) the tag names now; None when it names nothing or not a
    single-image manifest."""
    done = _skopeo(["inspect", "--raw", "--retry-times", "2",
                    *trust_args(reference.registry, None, config_dir),
                    f"docker://{reference}"], INSPECT_TIMEOUT_S, str(reference))
    if done.returncode != 0:
        return None
    try:
        manifest = json.loads(done.stdout)
        config = Digest.parse(manifest["config"]["digest"])
    except (ValueError, KeyError, TypeError):
        return None
    return Digest.of_bytes(done.stdout), config


def push(local_tag: str, image_id: Digest, reference: ImageReference, *,
         daemon_host: str | None = None, config_dir: Path | None = None) -> Pushed:
    """`local_tag` (whose image ID is `image_id`) at `reference`: nothing sent when the tag
    already names this image, else copied from the daemon by skopeo."""
    found = config_in_registry(reference, config_dir)
    if found is not None and found[1] == image_id:
        return Pushed(digest=found[0], sent=False)
    options = ["--dest-compress-format", "gzip",
               *trust_args(reference.registry, "dest", config_dir)]
    if daemon_host:
        options += ["--src-daemon-host", daemon_host]
    return Pushed(digest=_copy(options, f"docker-daemon:{local_tag}", reference, "skopeo push"),
                  sent=True)


def copy(source: ImageReference, digest: Digest, target: ImageReference, *,
         config_dir: Path | None = None) -> Digest:
    """`source@digest` to `target` registry to registry, blobs as they are (a mirror of what was
    pushed, the same manifest): the target's manifest digest."""
    options = ["--preserve-digests", *trust_args(source.registry, "src", config_dir),
               *trust_args(target.registry, "dest", config_dir)]
    return _copy(options, f"docker://{source.registry}/{source.repository}@{digest}", target,
                 "skopeo copy")
