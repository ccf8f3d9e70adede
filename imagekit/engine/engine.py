"""`Engine`: the few docker operations imagekit needs, with outcomes as data.

Builds go through `docker buildx build` (python-on-whales), the only path that takes BuildKit
secrets; their full plain-progress log is always returned, failed builds included, so callers
can keep it as evidence. Runs return exit code, stdout and stderr separately (a probe's JSON is on
stdout, its noise on stderr). Nothing here decides whether an outcome is good: operations do.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import cast

from pydantic import BaseModel, ConfigDict
from python_on_whales import DockerClient, DockerException

from imagekit.engine.buildkit import StepTracker
from imagekit.engine.client import docker_client, find_docker_binary
from imagekit.errors import InfraError, NotFound, TransportError
from imagekit.oci import Digest, ImageReference
from imagekit.progress import Progress
from imagekit.progress import current as current_progress


class BuildOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ok: bool
    returncode: int
    image_id: Digest | None = None
    log: str
    seconds: float
    argv: list[str]


class RunOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    returncode: int
    stdout: str
    stderr: str
    seconds: float


class ImageInfo(BaseModel):
    """What `docker image inspect` says that imagekit uses. `id` is the config digest (the
    image ID); `repo_digests` are manifest digests in registries; `diff_ids` are the
    uncompressed layer digests. Three different identities, never mixed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: Digest
    repo_tags: list[str] = []
    repo_digests: list[str] = []
    diff_ids: list[Digest] = []
    labels: dict[str, str] = {}
    env: list[str] = []
    entrypoint: list[str] | None = None
    size: int = 0

    def digest_in(self, repository_name: str) -> Digest | None:
        """The manifest digest this image has in `registry/repo`, if it was pushed there."""
        for entry in self.repo_digests:
            name, _, digest = entry.partition("@")
            if name == repository_name:
                return Digest.parse(digest)
        return None


class Engine:
    """The local docker daemon through one client binary."""

    def __init__(self, binary: str | None = None, config_dir: Path | None = None,
                 host: str | None = None) -> None:
        self.binary = binary or find_docker_binary()
        self.config_dir = config_dir
        self.host = host
        self.client: DockerClient = docker_client(self.binary, config_dir, host)

    # -- daemon ---------------------------------------------------------------------------------
    def ping(self) -> str:
        """The daemon's version; InfraError when no daemon answers."""
        why = "the docker daemon does not answer; run `imagekit infra up`"
        try:
            server = self.client.version().server
        except (DockerException, AttributeError) as exc:
            raise InfraError(why, where=self.binary) from exc
        if server is None:
            raise InfraError(why, where=self.binary)
        return str(server.version)

    # -- build ----------------------------------------------------------------------------------
    def build(self, context: Path, *, dockerfile: Path | None = None, tags: Sequence[str] = (),
              build_args: Mapping[str, str] | None = None,
              secrets: Mapping[str, Path] | None = None, no_cache: bool = False,
              network: str | None = "host",
              on_line: Callable[[str], None] | None = None,
              progress: Progress | None = None, label: str | None = None,
              layout: Path | None = None) -> BuildOutcome:
        """Build with BuildKit; `secrets` maps a secret id to a FILE (its content never enters
        argv). Never raises for a failed build: the outcome carries the code and the full log.

        RUN steps use the host's network by default: they need only the package registries,
        and this way a build does not depend on the daemon's bridge (docker0), which other
        tooling on a shared machine may have removed.

        Each BuildKit step (`#N [stage] RUN …`) is a phase of `progress` (default: the
        command line's), under the step `label` (default `build <repository>`).

        `layout`: write the image as an OCI layout folder there instead of loading it, with
        file times clamped to the build's SOURCE_DATE_EPOCH (`rewrite-timestamp`), explicit
        media types and compression (their defaults differ between BuildKit versions), and
        BuildKit's SLSA v1 provenance (mode=max) beside the image (an engine with the
        containerd image store and BuildKit >= 0.23: imagekit.infra.build_engine)."""
        secret_args = [f"id={sid},src={path}" for sid, path in (secrets or {}).items()]
        lines: list[str] = []
        started = time.monotonic()
        steps = StepTracker(progress or current_progress(), label or _build_label(tags, context))
        with tempfile.TemporaryDirectory(prefix="imagekit-build-") as tmp:
            metadata = Path(tmp) / "metadata.json"
            argv = ["buildx", "build", "--progress=plain", str(context)]
            try:
                # stream_logs=True: the log lines (python-on-whales annotates one union for all
                # its modes, Image | Iterator[str] | None)
                stream = cast(Iterator[str], self.client.buildx.build(
                    context, file=dockerfile, tags=list(tags), build_args=dict(build_args or {}),
                    secrets=secret_args, cache=not no_cache, load=layout is None,
                    progress="plain", network=network,
                    output={} if layout is None else {
                        "type": "oci", "dest": str(layout), "tar": "false",
                        "rewrite-timestamp": "true", "oci-mediatypes": "true",
                        "compression": "gzip"},
                    provenance=None if layout is None else {"mode": "max", "version": "v1"},
                    metadata_file=metadata, stream_logs=True))
                for line in stream:
                    lines.append(line.rstrip("\n"))
                    steps.feed(lines[-1])
                    if on_line is not None:
                        on_line(line.rstrip("\n"))
                returncode = 0
            except DockerException as exc:
                returncode = exc.return_code or 1
                if not lines and exc.stderr:
                    lines.extend(str(exc.stderr).splitlines())
            steps.close(ok=returncode == 0)
            image_id = None
            if returncode == 0 and metadata.exists():
                meta = json.loads(metadata.read_text() or "{}")
                found = meta.get("containerimage.config.digest") or \
                    meta.get("containerimage.digest")
                if found:
                    image_id = Digest.parse(found)
        if returncode == 0 and image_id is None and tags and layout is None:
            image_id = self.inspect(tags[0]).id
        return BuildOutcome(ok=returncode == 0, returncode=returncode, image_id=image_id,
                            log="\n".join(lines) + "\n", seconds=time.monotonic() - started,
                            argv=argv)

    # -- images ---------------------------------------------------------------------------------
    def exists(self, ref: str) -> bool:
        return bool(self.client.image.exists(ref))

    def inspect(self, ref: str) -> ImageInfo:
        try:
            image = self.client.image.inspect(ref)
        except DockerException as exc:
            raise NotFound(f"no local image {ref}", where="docker image inspect") from exc
        config = image.config
        return ImageInfo(
            id=Digest.parse(image.id), repo_tags=list(image.repo_tags or []),
            repo_digests=list(image.repo_digests or []),
            diff_ids=[Digest.parse(d) for d in (image.root_fs.layers or [])],
            labels=dict(config.labels or {}) if config else {},
            env=list(config.env or []) if config else [],
            entrypoint=list(config.entrypoint) if config and config.entrypoint else None,
            size=int(image.size or 0))

    def pull(self, ref: ImageReference | str) -> None:
        """Pull `ref` (layers the engine holds are not fetched again); after a `docker load`
        this records the registry digest (RepoDigests) the image is known by."""
        text = str(ref)
        try:
            with current_progress().phase("docker pull", text):
                self.client.image.pull(text, quiet=True)
        except DockerException as exc:
            raise TransportError(f"docker pull failed: {_last_line(exc.stderr)}",
                                 where=text) from exc

    def tag(self, source: str, target: str) -> None:
        self.client.image.tag(source, target)

    def push(self, ref: ImageReference | str) -> Digest:
        """Push a tag and return the registry's manifest digest for it (from RepoDigests)."""
        ref = ImageReference.parse(str(ref)) if not isinstance(ref, ImageReference) else ref
        text = str(ref)
        try:
            with current_progress().phase("docker push", text):  # a phase: it may take minutes
                self.client.image.push(text, quiet=True)
        except DockerException as exc:
            raise TransportError(f"docker push failed: {_last_line(exc.stderr)}",
                                 where=text) from exc
        # RepoDigests use the name as the daemon spells it (no docker.io prefix).
        info = self.inspect(text)
        short = ref.name.removeprefix("docker.io/").removeprefix("library/")
        digest = info.digest_in(ref.name) or info.digest_in(short)
        if digest is None:
            raise TransportError("pushed, but the daemon recorded no registry digest",
                                 where=text)
        return digest

    def history(self, ref: str) -> list[str]:
        """The `created_by` of every history entry, full length (what `docker history`
        shows), to check that no secret or CA material is visible there."""
        out = self._cli(["history", "--no-trunc", "--format", "{{json .}}", ref])
        return [json.loads(line).get("CreatedBy", "") for line in out.splitlines() if line]

    def save(self, ref: str, output: Path) -> Path:
        self.client.image.save(ref, output=output)
        return output

    def remove(self, ref: str, force: bool = False) -> None:
        with contextlib.suppress(DockerException):
            self.client.image.remove(ref, force=force)

    def import_rootfs(self, tarball: Path, tag: str, changes: Iterable[str] = ()) -> Digest:
        """`docker import` a root filesystem tarball (what debootstrap made) as an image."""
        try:
            image = self.client.image.import_(tarball, tag=tag, changes=list(changes))
        except DockerException as exc:
            raise InfraError(f"docker import failed: {_last_line(exc.stderr)}",
                             where=str(tarball)) from exc
        return Digest.parse(image.id)

    # -- containers ----------------------------------------------------------------------------
    def run(self, image: str, command: Sequence[str], *, entrypoint: str | None = None,
            network: str = "none", volumes: Sequence[tuple[Path, str, str]] = (),
            envs: Mapping[str, str] | None = None, timeout: float = 600,
            user: str | None = None) -> RunOutcome:
        """`docker run --rm --pull never --network none …`: exit code, stdout and stderr kept
        apart. Never a pull: every container imagekit runs starts from the engine's local copy
        (a probe of a 63-layer image must not fetch tens of GB again, nor a different image
        than the one built); an image that is not local fails with the engine's words.

        A container that outlives `timeout` is killed (by name) and reported as code 124.
        `user` (`UID:GID`) runs it as that user instead of the image's own."""
        name = f"imagekit-run-{int(time.time() * 1000)}-{id(self) % 100000}"
        argv = [self.binary]
        if self.config_dir:
            argv += ["--config", str(self.config_dir)]
        argv += ["run", "--rm", "--pull", "never", "--name", name, "--network", network]
        if user is not None:
            argv += ["--user", user]
        for host, container, mode in volumes:
            argv += ["--volume", f"{host}:{container}:{mode}"]
        for key, value in (envs or {}).items():
            argv += ["--env", f"{key}={value}"]
        if entrypoint is not None:
            argv += ["--entrypoint", entrypoint]
        argv += [image, *command]
        started = time.monotonic()
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            subprocess.run([self.binary, "rm", "-f", name], capture_output=True, check=False)
            return RunOutcome(returncode=124, stdout=_text(exc.stdout), stderr=_text(exc.stderr)
                              + f"\nimagekit: killed after {timeout:.0f} s",
                              seconds=time.monotonic() - started)
        return RunOutcome(returncode=done.returncode, stdout=done.stdout, stderr=done.stderr,
                          seconds=time.monotonic() - started)

    # -- raw ------------------------------------------------------------------------------------
    def argv(self, *args: str) -> list[str]:
        """The docker command line for `args` against this engine (its config dir and host)."""
        argv = [self.binary]
        if self.config_dir:
            argv += ["--config", str(self.config_dir)]
        if self.host:
            argv += ["--host", self.host]
        return [*argv, *args]

    def _cli(self, args: Sequence[str]) -> str:
        done = subprocess.run(self.argv(*args), capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise TransportError(f"docker {args[0]} failed: {_last_line(done.stderr)}",
                                 where=" ".join(args[:2]))
        return done.stdout


def _build_label(tags: Sequence[str], context: Path) -> str:
    """`build vllm` for `imagekit-local/vllm:abc`; the context's name without a tag."""
    if tags:
        return "build " + tags[0].rsplit("/", 1)[-1].split(":", 1)[0]
    return f"build {Path(context).name}"


def _last_line(text: object) -> str:
    lines = [line for line in str(text or "").splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "no message"


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return str(value or "")
