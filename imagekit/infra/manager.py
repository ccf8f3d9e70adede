"""`infra up | down | status`: the order things start in, the lock, and the recorded state.

Order: docker engine → PKI/credentials → token service → registries → (cluster, if asked).
Everything is idempotent; a second `up` with all parts running only verifies them (well under
two seconds). `down` stops, in reverse order, only processes whose records still match /proc.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from imagekit.errors import InfraError
from imagekit.infra import apt, build_engine, docker, processes, registries
from imagekit.infra.state import ComponentStatus, InfraState, StatePaths, load_state, save_state
from imagekit.progress import current as current_progress

CLUSTER_MODULE = "imagekit.infra.cluster"


@contextlib.contextmanager
def _locked(paths: StatePaths) -> Iterator[None]:
    """One `up`/`down` at a time (make test and the pytest fixture may race)."""
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.root / ".lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _require_root(action: str) -> None:
    if os.geteuid() != 0:
        raise InfraError(f"`imagekit infra {action}` must run as root", where="infra")


def cluster_module() -> ModuleType | None:
    """The cluster helper's module, if it exists in this checkout."""
    if importlib.util.find_spec(CLUSTER_MODULE) is None:
        return None
    return importlib.import_module(CLUSTER_MODULE)


def _require_cluster() -> ModuleType:
    module = cluster_module()
    if module is None:
        raise InfraError("the local Kubernetes cluster is not part of this checkout yet "
                         f"({CLUSTER_MODULE} is missing); run `imagekit infra up` "
                         "without --cluster",
                         where="infra --cluster")
    return module


def _initial_state(paths: StatePaths) -> InfraState:
    return InfraState(state_dir=paths.root, registries=registries.endpoints(paths),
                      docker_config_dir=paths.docker_config_dir, ca_file=paths.ca_cert,
                      kubeconfig=None, docker_host=docker.DOCKER_HOST,
                      docker_client=docker.DOCKER_CLIENT, token_realm=registries.TOKEN_REALM)


def _recorded_state(paths: StatePaths) -> InfraState | None:
    """The state `up` recorded, or None when infra was never brought up here."""
    try:
        return load_state(paths.root)
    except InfraError:
        return None


def _previous_kubeconfig(paths: StatePaths):  # -> Path | None
    state = _recorded_state(paths)
    return state.kubeconfig if state is not None else None


def _k8s_bin(module: ModuleType, k8s_bin: Path | None) -> Path:
    """The caller's Kubernetes binaries folder (the CLI passes IMAGEKIT_K8S_BIN), else the
    cluster module's default."""
    return k8s_bin if k8s_bin is not None else Path(module.DEFAULT_K8S_BIN)


def up(cluster: bool = False, paths: StatePaths | None = None,
       k8s_bin: Path | None = None, mirror: str | None = None
       ) -> tuple[InfraState, list[ComponentStatus]]:
    """Start what is missing; return the recorded state and every component's status.
    `mirror`: the Debian archive packages and sources come from (default the one this
    machine's apt uses; the CLI passes $IMAGEKIT_DEBIAN_MIRROR)."""
    paths = paths or StatePaths()
    _require_root("up")
    cluster_mod = _require_cluster() if cluster else None
    with _locked(paths):
        for directory in (paths.root, paths.pids, paths.logs):
            directory.mkdir(parents=True, exist_ok=True)
        # one apt transaction for both on a fresh machine; a no-op dpkg-query afterwards
        apt.ensure_packages(["docker.io", "docker-registry"], paths.logs / "apt.log")
        with current_progress().phase("infra", "docker engine"):
            components = [docker.up(paths, mirror=mirror)]
        with current_progress().phase("infra", "build engine"):
            build_engine.start(paths, mirror=mirror)
            components.append(build_engine.status(paths))
        with current_progress().phase("infra", "registries"):
            components += registries.up(paths, install=False, mirror=mirror)
            docker.install_ca(paths.ca_cert, [ep.address for ep in
                                              registries.endpoints(paths).values()
                                              if ep.scheme == "https"])
        state = _initial_state(paths).model_copy(
            update={"kubeconfig": _previous_kubeconfig(paths)})
        save_state(state)
        if cluster_mod is not None:
            with current_progress().phase("infra", "cluster"):
                result: ComponentStatus = cluster_mod.up(
                    state, k8s_bin=_k8s_bin(cluster_mod, k8s_bin), mirror=mirror)
            components.append(result)
            if result.kubeconfig is not None:
                state = state.model_copy(update={"kubeconfig": result.kubeconfig})
                save_state(state)
        broken = [c for c in components if not c.running]
        if broken:
            raise InfraError("not running after up: " + ", ".join(
                f"{c.name} ({c.detail})" for c in broken), where=str(paths.logs))
        return state, components


def status(paths: StatePaths | None = None,
           k8s_bin: Path | None = None) -> list[ComponentStatus]:
    """What runs right now (checked live, never read from the state file alone)."""
    paths = paths or StatePaths()
    components = [docker.status(paths), build_engine.status(paths)]
    components += registries.status(paths)
    module = cluster_module()
    if module is not None:
        state = _recorded_state(paths)
        if state is not None:
            components.append(_truthful_cluster(
                module, module.status(state, k8s_bin=_k8s_bin(module, k8s_bin)), paths))
        else:
            components.append(ComponentStatus(name="cluster", running=False,
                                              detail="infra was never brought up",
                                              fix="imagekit infra up --cluster"))
    return components


def _cluster_names(module: ModuleType, paths: StatePaths) -> list[str]:
    names = list(getattr(module, "DAEMONS", ()))
    return names or [n for n in processes.tracked_names(paths) if n.startswith("k8s-")]


def _truthful_cluster(module: ModuleType, component: ComponentStatus,
                      paths: StatePaths) -> ComponentStatus:
    """A cluster that is not ours but whose API port answers says so (a stale record, or this
    state directory is a copy): 'not running' alone would be a lie."""
    if component.ours or component.running:
        return component
    port = getattr(module, "API_PORT", None)
    if port is None or not processes.port_open("127.0.0.1", int(port)):
        return component
    states = {name: processes.record_state(name, paths) for name in _cluster_names(module, paths)}
    kinds = sorted({v for v in states.values() if v != "ours"})
    why = {"stale": "our records are stale", "foreign": "its processes were started from "
           "another state directory", "none": "we hold no record of it"}
    detail = (f"{component.detail}; the API on 127.0.0.1:{port} answers, but not from a process "
              f"this state directory ({paths.root}) started: "
              + ", ".join(why[k] for k in kinds if k in why))
    return component.model_copy(update={"detail": detail, "pid": None, "ours": False})


def down(cluster: bool = True, paths: StatePaths | None = None,
         k8s_bin: Path | None = None) -> list[str]:
    """Stop what we started (cluster first, engine last); return the names really stopped.

    Only processes whose records match /proc AND that were started from this state directory
    are signalled; the cluster's data is removed only when one of its daemons was ours."""
    paths = paths or StatePaths()
    _require_root("down")
    stopped: list[str] = []
    with _locked(paths):
        module = cluster_module() if cluster else None
        if module is not None:
            state = _recorded_state(paths)
            names = _cluster_names(module, paths)
            ours = [n for n in names if processes.running(n, paths) is not None]
            if state is not None and ours:
                module.down(state, k8s_bin=_k8s_bin(module, k8s_bin))
                if not any(processes.running(n, paths) for n in ours):
                    stopped.append("cluster")
        stopped += registries.down(paths)
        if build_engine.stop(paths):
            stopped.append("build-engine")
        if docker.down(paths):
            stopped.append("dockerd")
    return stopped
