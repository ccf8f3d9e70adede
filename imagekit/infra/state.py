"""What `imagekit infra up` recorded, as typed models every other layer reads.

The state file says *where* things are (addresses, CA, docker config dir); it never proves that
they run. Whether a recorded process is really ours and alive is decided by
`imagekit.infra.processes`, which compares PID, kernel start time and command line with /proc,
and checks that the process was started from this very state directory.

The state records no absolute location of itself: paths inside the state directory are written
relative to it (`"state_dir": "."`), and `load_state` returns them inside the directory it read
them from. A copy of the state (IMAGEKIT_STATE_DIR pointing at it) therefore speaks of the copy,
never of the directory it was copied from. Older files with absolute paths are rebased the same
way when read.

Nothing here reads the environment: the CLI reads $IMAGEKIT_STATE_DIR (imagekit.settings) and
hands the directory down (`load_state(root)`, `StatePaths(root)`); no root means
/var/lib/imagekit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit.errors import InfraError

#: Where infra keeps its state unless the caller names another (the CLI: $IMAGEKIT_STATE_DIR).
DEFAULT_STATE_DIR = Path("/var/lib/imagekit")

#: The three loopback registries of the contract: name -> (port, scheme, auth).
Scheme = Literal["http", "https"]
Auth = Literal["none", "basic", "bearer"]
REGISTRY_LAYOUT: dict[str, tuple[int, Scheme, Auth]] = {
    "staging": (5001, "http", "none"),
    "production": (5002, "https", "basic"),
    "target": (5003, "https", "bearer"),
}
#: The fourth loopback registry: go-containerregistry's own registry WITH the OCI 1.1 referrers
#: API (distribution 2.8 has only the tag schema), built from Debian's source by infra
#: (imagekit.infra.referrers_registry). Plain HTTP, no auth; manifests in memory, blobs on disk.
REFERRERS_LAYOUT: dict[str, tuple[int, Scheme, Auth]] = {
    "referrers": (5004, "http", "none"),
}
#: Every loopback registry infra starts, by name.
ALL_REGISTRIES: dict[str, tuple[int, Scheme, Auth]] = {**REGISTRY_LAYOUT, **REFERRERS_LAYOUT}
TOKEN_SERVICE_PORT = 5010
LOOPBACK = "127.0.0.1"


def state_dir(given: Path | str | None = None) -> Path:
    """The state directory: `given` (the CLI passes $IMAGEKIT_STATE_DIR, imagekit.settings),
    else /var/lib/imagekit. Nothing here reads the environment."""
    return Path(given) if given else DEFAULT_STATE_DIR


class StatePaths:
    """Every file infra writes, named in one place so nothing guesses a path."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = state_dir(root)

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def pids(self) -> Path:
        return self.root / "pids"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def tls(self) -> Path:
        return self.root / "tls"

    @property
    def ca_cert(self) -> Path:
        return self.tls / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.tls / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.tls / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.tls / "server.key"

    @property
    def token_cert(self) -> Path:
        return self.tls / "token-signing.crt"

    @property
    def token_key(self) -> Path:
        return self.tls / "token-signing.key"

    @property
    def secrets(self) -> Path:
        return self.root / "secrets"

    @property
    def credentials(self) -> Path:
        return self.secrets / "credentials.json"

    @property
    def docker_config_dir(self) -> Path:
        return self.root / "docker-config"

    @property
    def registries(self) -> Path:
        return self.root / "registries"

    @property
    def apt(self) -> Path:
        return self.root / "apt"

    def registry_dir(self, name: str) -> Path:
        return self.registries / name


class RegistryEndpoint(BaseModel):
    """One loopback registry: where it listens, how it speaks, how it authenticates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    address: str = Field(description="host:port, e.g. 127.0.0.1:5001")
    scheme: Literal["http", "https"]
    auth: Literal["none", "basic", "bearer"]
    ca_file: Path | None = None
    token_realm: str | None = Field(None, description="Bearer realm (target only)")
    token_service: str | None = Field(None, description="Bearer service name (target only)")

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}"


class ComponentStatus(BaseModel):
    """What `infra status` says about one part: runs or not, where, and how to fix it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    running: bool
    address: str | None = None
    pid: int | None = None
    ours: bool = Field(False, description="started (and tracked) by imagekit")
    detail: str = ""
    fix: str | None = Field(None, description="the command that fixes a missing part")
    kubeconfig: Path | None = Field(None, description="cluster only: its admin kubeconfig")
    kubectl: Path | None = Field(None, description="cluster only: a kubectl to use with it (the "
                                 "cluster's binaries folder, else PATH); None: none found")


class InfraState(BaseModel):
    """The recorded layout of the local infrastructure (see the module docstring for trust)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state_dir: Path
    registries: dict[str, RegistryEndpoint]
    docker_config_dir: Path
    ca_file: Path
    kubeconfig: Path | None = None
    docker_host: str = "unix:///var/run/docker.sock"
    docker_client: Path = Field(Path("/usr/bin/docker"),
                                description="the docker CLI that matches the daemon (buildx works)")
    token_realm: str | None = None

    def registry(self, name: str) -> RegistryEndpoint:
        try:
            return self.registries[name]
        except KeyError:
            raise InfraError(f"no registry named {name!r}; known: {sorted(self.registries)}",
                             where=str(self.state_dir)) from None


def registry_env(state: InfraState | None = None, root: Path | None = None) -> dict[str, str]:
    """The environment a docker-style client needs to find the credentials (DOCKER_CONFIG);
    `state`, else the one recorded in `root` (the state directory; default /var/lib/imagekit).

    Merge it into os.environ for a subprocess; secrets stay in the file it names.
    """
    state = state or load_state(root)
    return {"DOCKER_CONFIG": str(state.docker_config_dir), "DOCKER_HOST": state.docker_host}


def registry_trust(registry: str, root: Path | None = None) -> dict[str, Any]:
    """RegistryOptions keywords for one of infra's loopback registries (its CA, infra's docker
    config dir, plain HTTP where it is plain); {} when there is no infra or it is not one."""
    try:
        state = load_state(root)
    except InfraError:
        return {}
    for endpoint in state.registries.values():
        if endpoint.address == registry:
            trust: dict[str, Any] = {"ca_file": endpoint.ca_file or state.ca_file,
                                     "docker_config": state.docker_config_dir}
            if endpoint.scheme == "http":
                trust["insecure"] = frozenset({registry})
            return trust
    return {}


def _rebase(value: Any, recorded_root: str | None, root: Path) -> Any:
    """A path of the state file as a path inside `root`: relative ones are joined to it, absolute
    ones under the recorded (older, absolute) state_dir are moved under it, others are kept."""
    if value is None:
        return None
    path = Path(value)
    if not path.is_absolute():
        return str(root / path)
    if recorded_root and Path(recorded_root).is_absolute():
        try:
            return str(root / path.relative_to(recorded_root))
        except ValueError:
            pass
    return value


def _relative(value: Any, root: Path) -> Any:
    if value is None:
        return None
    path = Path(value)
    try:
        return str(path.relative_to(root)) if path.is_absolute() else value
    except ValueError:
        return value


_ROOTED = ("docker_config_dir", "ca_file", "kubeconfig")


def load_state(root: Path | None = None) -> InfraState:
    """Read the recorded state, or say which command creates it."""
    paths = StatePaths(root)
    try:
        raw = paths.state_file.read_text()
    except FileNotFoundError:
        raise InfraError("no infrastructure state; run `imagekit infra up` (as root)",
                         where=str(paths.state_file)) from None
    except PermissionError:
        raise InfraError("cannot read infrastructure state (run as root)",
                         where=str(paths.state_file)) from None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("state.json is not an object")
        base = paths.root.absolute()
        recorded = data.get("state_dir")
        for key in _ROOTED:
            data[key] = _rebase(data.get(key), recorded, base)
        for endpoint in (data.get("registries") or {}).values():
            if isinstance(endpoint, dict):
                endpoint["ca_file"] = _rebase(endpoint.get("ca_file"), recorded, base)
        data["state_dir"] = str(base)  # where it was read from, whatever the file says
        return InfraState.model_validate(data)
    except (ValueError, ValidationError) as exc:
        raise InfraError(f"unreadable infrastructure state: {str(exc).splitlines()[0]}; "
                         "run `imagekit infra up` to rewrite it",
                         where=str(paths.state_file)) from None


def save_state(state: InfraState) -> None:
    """Write state.json atomically (readers never see half a file)."""
    paths = StatePaths(state.state_dir)
    paths.root.mkdir(parents=True, exist_ok=True)
    root = paths.root.absolute()
    data = state.model_dump(mode="json")
    data["state_dir"] = "."
    for key in _ROOTED:
        data[key] = _relative(data.get(key), root)
    for endpoint in data["registries"].values():
        endpoint["ca_file"] = _relative(endpoint.get("ca_file"), root)
    tmp = paths.state_file.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, paths.state_file)
