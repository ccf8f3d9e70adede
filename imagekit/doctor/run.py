"""`imagekit doctor`: every check a role needs, at once, each within a bound.

The checks run side by side, each in a daemon thread, and the report is taken at
`check_seconds` whatever is still waiting: a check that has not answered by then is a FAIL that
says so (a daemon thread is never waited for at exit). Below that outer bound each network
question has its own: registry calls PROBE_SECONDS with one retry at most, docker's client a
time-out per process. So a closed port, a black-holed address or a hung daemon each cost
seconds, never a retry loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.doctor.models import (
    DoctorReport,
    Part,
    RegistryNeed,
    Role,
    parts_for,
    summary_of,
)
from imagekit.errors import ImagekitError
from imagekit.results import CheckResult, Status, overall

if TYPE_CHECKING:
    from imagekit.kube.incluster import InCluster
    from imagekit.registry import RegistryOptions
    from imagekit.spec.models import ImagesSpec

#: Seconds one network question may take, connection and retries included.
PROBE_SECONDS = 5.0
#: Seconds the report waits for any check: the cluster's is the longest (connect, version,
#: then one access review per permission, 32 of them: a few hundred ms on a local network,
#: about 3 s at 100 ms a round trip).
CHECK_SECONDS = 10.0

Record = Callable[[CheckResult], None]


@dataclass(frozen=True)
class DoctorInputs:
    """What the command resolved: the role, the spec's profile, where the cluster and the
    evidence are, the registry options (trust, credentials), the signing key if given."""

    spec: ImagesSpec
    profile: str
    evidence_root: Path
    registry_options: RegistryOptions
    role: Role | None = None
    namespace: str = "imagekit"
    #: where the cluster commands would connect; None with `cluster_missing` saying why
    cluster: Path | InCluster | None = None
    cluster_missing: str = "no cluster credentials"
    signing_key: Path | None = None
    min_free_gib: float | None = None
    docker: str | None = None
    state_dir: Path | None = None
    check_seconds: float = CHECK_SECONDS
    probe_seconds: float = PROBE_SECONDS


@dataclass
class _Task:
    """Checks that one thread records (`names` in print order) and the function that does."""

    names: list[str]
    run: Callable[[Record], None]


def bounded_options(options: RegistryOptions, seconds: float) -> RegistryOptions:
    """The registry options with every call bounded to `seconds`: one retry at most, a
    refused connection given up after one second."""
    from imagekit.registry import RetryPolicy

    retry = RetryPolicy(attempts=2, wait_initial=0.1, wait_max=0.5, deadline=seconds,
                        broken_window=min(1.0, seconds), retry_after_max=1.0)
    return options.model_copy(update={"retry": retry, "timeout_s": seconds})


def _tasks(inputs: DoctorInputs) -> list[_Task]:
    from imagekit.doctor import cluster, local, registries

    parts = parts_for(inputs.role)
    seconds = inputs.probe_seconds
    tasks: list[_Task] = []
    engine, buildx, disk = Part.DOCKER in parts, Part.BUILDX in parts, Part.DISK in parts
    if engine or buildx or disk:
        names = [p.value for p in (Part.DOCKER, Part.BUILDX, Part.DISK) if p in parts]
        places: list[tuple[str, Path | None, float, str]] = [
            ("evidence store", inputs.evidence_root, local.EVIDENCE_MIN_FREE_GIB, "")]
        minimum = inputs.min_free_gib if inputs.min_free_gib is not None else \
            local.DOCKER_MIN_FREE_GIB
        tasks.append(_Task(names, lambda record: local.check_engine(
            inputs.docker, inputs.state_dir, seconds, record, engine=engine, buildx=buildx,
            disk=places if disk else None, min_free_gib=minimum)))
    if Part.CLUSTER in parts or Part.RBAC in parts:
        names = [p.value for p in (Part.CLUSTER, Part.RBAC) if p in parts]
        tasks.append(_Task(names, lambda record: cluster.check_cluster(
            inputs.cluster, inputs.cluster_missing, inputs.namespace, record,
            rbac=Part.RBAC in parts, required=inputs.role is not None)))
    if Part.REGISTRIES in parts:
        options = bounded_options(inputs.registry_options, seconds)
        for need in registries.registry_needs(inputs.spec, inputs.profile, inputs.role):
            tasks.append(_Task([registries.check_name(need.registry)],
                               _registry_task(need, options, seconds)))
    if Part.EVIDENCE in parts:
        tasks.append(_Task([Part.EVIDENCE.value],
                           lambda record: record(local.check_evidence(inputs.evidence_root))))
    if Part.KEY in parts and inputs.signing_key is not None:
        key = inputs.signing_key
        tasks.append(_Task([Part.KEY.value], lambda record: record(local.check_key(key))))
    return tasks


def _registry_task(need: RegistryNeed, options: RegistryOptions, seconds: float
                   ) -> Callable[[Record], None]:
    from imagekit.doctor.registries import check_registry

    return lambda record: record(check_registry(need, options, seconds))


def _guarded(task: _Task, record: Record) -> None:
    """Run one task; what it raised becomes the result of each check it left unrecorded."""
    try:
        task.run(record)
    except ImagekitError as exc:
        for name in task.names:
            record(CheckResult(name=name, status=Status.FAIL, detail=exc.one_line()))
    except Exception as exc:  # noqa: BLE001 - a check that broke is ERROR, never a pass
        for name in task.names:
            record(CheckResult(name=name, status=Status.ERROR,
                               detail=f"the check broke: {type(exc).__name__}: {exc}"))


def run_checks(tasks: list[_Task], seconds: float) -> list[CheckResult]:
    """Every task in its own daemon thread; the results at `seconds` (or sooner, when all
    are done). A task's first check still waiting then is a FAIL that says so, the ones after
    it in that task DEFERRED (they depend on it). Each name's first result wins."""
    results: dict[str, CheckResult] = {}
    lock = threading.Lock()

    def record(result: CheckResult) -> None:
        with lock:
            results.setdefault(result.name, result)

    threads = [threading.Thread(target=_guarded, args=(task, record), daemon=True,
                                name=f"doctor {task.names[0]}") for task in tasks]
    for thread in threads:
        thread.start()
    end = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, end - time.monotonic()))
    with lock:
        taken = dict(results)
    checks: list[CheckResult] = []
    for task in tasks:
        waiting = [name for name in task.names if name not in taken]
        for name in task.names:
            if name in taken:
                checks.append(taken[name])
            elif name == waiting[0]:
                checks.append(CheckResult(name=name, status=Status.FAIL,
                                          detail=f"no answer within {seconds:g} s"))
            else:   # it comes after the one that hangs: not judged
                checks.append(CheckResult(name=name, status=Status.DEFERRED,
                                          detail=f"not judged: {waiting[0]} gave no answer "
                                                 f"within {seconds:g} s"))
    return checks


#: the order checks are printed in: the parts' order, each registry where the registries are
_ORDER = {part.value: rank for rank, part in enumerate(
    (Part.DOCKER, Part.BUILDX, Part.CLUSTER, Part.RBAC, Part.REGISTRIES, Part.DISK,
     Part.EVIDENCE, Part.KEY))}


def run_doctor(inputs: DoctorInputs) -> DoctorReport:
    """Every check `inputs.role` needs (every part without a role), each bounded."""
    checks = run_checks(_tasks(inputs), inputs.check_seconds)
    checks.sort(key=lambda c: _ORDER.get(c.name.split(" ", 1)[0], len(_ORDER)))
    return DoctorReport(role=inputs.role, status=overall(checks), summary=summary_of(checks),
                        checks=checks)
