"""The roles, the parts each needs, and the report `imagekit doctor` prints.

Why roles: each person of the release path meets a different part first. CI builds and pushes
(docker, buildx, the base and staging registries, disk, evidence); the release engineer copies
between registries and signs; the operator runs Pods on the cluster; the auditor only reads.
Checking what the role does not use would fail a machine that is fine for its job.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from imagekit.results import CheckResult, Status


class Role(StrEnum):
    CI = "ci"
    RELEASE = "release"
    OPERATOR = "operator"
    AUDITOR = "auditor"


class Part(StrEnum):
    """One thing a role needs, checked by one (or, for registries, one per host) check."""

    DOCKER = "docker"
    BUILDX = "buildx"
    REGISTRIES = "registry"
    DISK = "disk"
    EVIDENCE = "evidence"
    CLUSTER = "cluster"
    RBAC = "rbac"
    KEY = "signing-key"


class Access(StrEnum):
    """What a role does at a registry. Push includes pull (a copy reads before it writes)."""

    PULL = "pull"
    PUSH = "push"


#: What each role needs; no role: every part (what can be judged here).
PARTS: dict[Role, tuple[Part, ...]] = {
    Role.CI: (Part.DOCKER, Part.BUILDX, Part.REGISTRIES, Part.DISK, Part.EVIDENCE),
    Role.RELEASE: (Part.REGISTRIES, Part.EVIDENCE, Part.KEY),
    Role.OPERATOR: (Part.CLUSTER, Part.RBAC, Part.REGISTRIES, Part.EVIDENCE),
    Role.AUDITOR: (Part.REGISTRIES, Part.EVIDENCE),
}
ALL_PARTS: tuple[Part, ...] = (Part.DOCKER, Part.BUILDX, Part.CLUSTER, Part.RBAC,
                               Part.REGISTRIES, Part.DISK, Part.EVIDENCE, Part.KEY)


def parts_for(role: Role | None) -> tuple[Part, ...]:
    """The parts `role` needs, in the order they are printed."""
    wanted = set(PARTS[role]) if role is not None else set(ALL_PARTS)
    return tuple(part for part in ALL_PARTS if part in wanted)


class RegistryNeed(BaseModel):
    """One registry host and what the role does there: the repository asked about (with the
    tag the role reads, for a base or mirror), and which of the profile's places the host is
    (staging, base, …)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    registry: str
    repository: str
    tag: str | None = None
    access: Access
    places: tuple[str, ...]


class DoctorReport(BaseModel):
    """What `imagekit doctor --json` prints: the verdict, its one line, and each check."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role | None
    status: Status
    summary: str
    checks: list[CheckResult]


def summary_of(checks: list[CheckResult]) -> str:
    """The verdict line: `doctor: FAIL (2 of 7 checks failed)`, counting what did not pass."""
    from imagekit.results import overall

    if not checks:
        return "doctor: ERROR (no check applies to this role)"
    total = len(checks)
    counts = [(n, what) for n, what in (
        (sum(c.status is Status.FAIL for c in checks), "failed"),
        (sum(c.status is Status.DEFERRED for c in checks), "not judged"),
        (sum(c.status is Status.ERROR for c in checks), "broke")) if n]
    if not counts:
        return f"doctor: PASS ({total} check{'s' if total != 1 else ''})"
    (first, what), rest = counts[0], counts[1:]
    more = "".join(f", {n} {said}" for n, said in rest)
    return f"doctor: {overall(checks).value} ({first} of {total} checks {what}{more})"
