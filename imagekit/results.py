"""Statuses and check results: the data every operation reports and evidence stores."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class Status(StrEnum):
    """PASS and FAIL are verdicts; DEFERRED (could not run here, says why) and ERROR (the check
    itself broke) are not, and neither ever counts as a pass. One meaning each, used alike by
    exit codes, the gate, JUnit and in-toto (`MEANING`; docs/design/evidence.md has the table)."""

    PASS = "PASS"
    FAIL = "FAIL"
    DEFERRED = "DEFERRED"
    ERROR = "ERROR"

    @property
    def is_pass(self) -> bool:
        return self is Status.PASS


#: The one meaning of each status (docs/design/evidence.md, "Statuses").
MEANING: dict[Status, str] = {
    Status.PASS: "the check ran and the property holds",
    Status.FAIL: "the check ran and the property does not hold (a profile acceptance is the "
                 "gate's policy, never a different status)",
    Status.DEFERRED: "the check could not run here and says why: no verdict, never a pass "
                     "(exit 1; the gate refuses it when required and warns otherwise)",
    Status.ERROR: "the check itself broke: no verdict, never a pass",
}


class CheckResult(BaseModel):
    """One named check with its verdict and a human-readable reason."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    status: Status
    detail: str = ""
    data: dict = Field(default_factory=dict)


def overall(checks: list[CheckResult] | tuple[CheckResult, ...]) -> Status:
    """Worst status wins: ERROR > FAIL > DEFERRED > PASS. An empty list is not a pass."""
    if not checks:
        return Status.ERROR
    order = [Status.ERROR, Status.FAIL, Status.DEFERRED, Status.PASS]
    statuses = {c.status for c in checks}
    for status in order:
        if status in statuses:
            return status
    return Status.ERROR


def exit_code_for(checks: list[CheckResult] | tuple[CheckResult, ...]) -> int:
    """0 only when every check passed; 2 when a check broke; 1 otherwise (FAIL or DEFERRED)."""
    verdict = overall(checks)
    if verdict is Status.PASS:
        return 0
    if verdict is Status.ERROR:
        return 2
    return 1


class CheckReport(BaseModel):
    """What `--json` prints for any command that runs checks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    subject: str
    digest: str | None = None
    status: Status
    checks: list[CheckResult]
    evidence: str | None = None

    @classmethod
    def of(cls, subject: str, checks: list[CheckResult], *, digest: str | None = None,
           evidence: str | None = None) -> CheckReport:
        return cls(subject=subject, digest=digest, status=overall(checks), checks=checks,
                   evidence=evidence)
