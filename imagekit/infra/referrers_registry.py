"""The fourth loopback registry: go-containerregistry's own `pkg/registry` WITH the OCI 1.1
referrers API (`registry.WithReferrersSupport(true)`), on 127.0.0.1:5004, plain HTTP, no auth.

Why it exists: Debian's distribution 2.8 (staging, production, target) and `crane registry
serve` have only the referrers tag schema; most production registries answer the API. This one
does, so the API path meets a real registry nobody on the project wrote.

How it is made (no module download, no fetched source in the repository):
- Debian sid's `golang-github-google-go-containerregistry-dev` (0.20.7) is fetched once with
  the private apt configuration (`imagekit.infra.apt.download_suite_package`), never installed;
  `dpkg-deb -x` unpacks it under `<state>/referrers-registry/`;
- bookworm's Go (`golang-go`, 1.19) builds our 30-line `referrers/main.go` in GOPATH mode
  (`GO111MODULE=off`, GOPATH = a directory whose `src/github.com/google/go-containerregistry`
  is the package's `/usr/share/gocode/...`): about a second; rebuilt only when the .deb,
  main.go or the Go toolchain changes (a fingerprint file next to the binary);
- blobs on disk (`registry.NewDiskBlobHandler`, `<state>/registries/referrers/blobs`);
  manifests and tags live in the process's memory: a restart forgets them (the registry's
  design; tests and the rehearsal push what they read).

Quirks of this registry, measured (docs/design/registry.md): no `OCI-Subject` header on a manifest
PUT (so clients also write the `sha256-<hex>` tag-schema index there, as oras does); each
listed referrer's `artifactType` is the referrer's *config* media type
(`application/vnd.oci.empty.v1+json` for cosign's bundles) and carries no annotations; the API
answers 404 NAME_UNKNOWN for a repository it has never seen.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from imagekit.errors import InfraError
from imagekit.infra import apt
from imagekit.infra.state import REFERRERS_LAYOUT, StatePaths

NAME = "referrers"
PACKAGE = "golang-github-google-go-containerregistry-dev"
SUITE = "sid"
GO_PACKAGE = "golang-go"
GO = Path("/usr/bin/go")
MAIN_GO = Path(__file__).with_name("referrers") / "main.go"
GOCODE = Path("usr/share/gocode/src/github.com/google/go-containerregistry")
BINARY_NAME = "imagekit-referrers-registry"


def port() -> int:
    return REFERRERS_LAYOUT[NAME][0]


def build_dir(paths: StatePaths) -> Path:
    return paths.root / "referrers-registry"


def blobs_dir(paths: StatePaths) -> Path:
    return paths.registry_dir(NAME) / "blobs"


def binary_path(paths: StatePaths) -> Path:
    return build_dir(paths) / "bin" / BINARY_NAME


def _sha256(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
        digest.update(b"\0")
    return digest.hexdigest()


def _go_identity() -> bytes:
    """The Go toolchain the binary was built with (its VERSION file: what `go version` says)."""
    root = Path(os.path.realpath(GO)).parent.parent
    try:
        return (root / "VERSION").read_bytes()
    except OSError:
        return os.path.realpath(GO).encode()


def ensure_built(paths: StatePaths, log: Path, mirror: str | None = None) -> Path:
    """The registry binary, built from Debian's source (from `mirror`, default the archive this
    machine's apt uses) when missing or out of date."""
    apt.ensure_packages([GO_PACKAGE], log)
    if not GO.exists():
        raise InfraError(f"{GO_PACKAGE} is installed but {GO} is missing", where=str(GO))
    deb = apt.download_suite_package(PACKAGE, SUITE, paths, log, mirror)
    binary = binary_path(paths)
    stamp = binary.with_name("build.fingerprint")
    fingerprint = _sha256(deb.name.encode(), deb.read_bytes(), MAIN_GO.read_bytes(),
                          _go_identity())
    if binary.is_file() and stamp.is_file() and stamp.read_text().strip() == fingerprint:
        return binary
    root = build_dir(paths)
    unpacked = root / "deb"
    if unpacked.exists():
        shutil.rmtree(unpacked)
    unpacked.mkdir(parents=True)
    _run(["dpkg-deb", "-x", str(deb), str(unpacked)], "unpack", log)
    gopath = root / "gopath"
    if gopath.exists():
        shutil.rmtree(gopath)
    link = gopath / "src" / "github.com" / "google" / "go-containerregistry"
    link.parent.mkdir(parents=True)
    link.symlink_to(unpacked / GOCODE, target_is_directory=True)
    main = gopath / "src" / BINARY_NAME
    main.mkdir(parents=True)
    shutil.copy2(MAIN_GO, main / "main.go")
    binary.parent.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root),
           "GO111MODULE": "off", "GOPATH": str(gopath), "GOCACHE": str(root / "gocache"),
           "GOFLAGS": "", "CGO_ENABLED": "0", "GOTOOLCHAIN": "local"}
    _run([str(GO), "build", "-o", str(binary), "."], "go build", log, cwd=main, env=env)
    stamp.write_text(fingerprint + "\n")
    return binary


def _run(argv: list[str], what: str, log: Path, cwd: Path | None = None,
         env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        handle.write(f"--- imagekit: referrers registry: {what}: {' '.join(argv)}\n".encode())
        handle.flush()
        done = subprocess.run(argv, stdout=handle, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                              timeout=600, check=False)
    if done.returncode != 0:
        raise InfraError(f"referrers registry {what} failed (exit {done.returncode})",
                         where=str(log))


def argv(paths: StatePaths, binary: Path) -> list[str]:
    from imagekit.infra.state import LOOPBACK

    return [str(binary), "-addr", f"{LOOPBACK}:{port()}", "-blobs", str(blobs_dir(paths))]


def binary_fingerprint(binary: Path) -> bytes:
    try:
        return hashlib.sha256(binary.read_bytes()).hexdigest().encode()
    except OSError:
        return b""
