"""The difference against the previous build of the same image: the base
digest, the package versions the probes saw, and the checks whose status changed.

"The same image": builds (kind `build`, PASS) with the same name and profile as this report's
image; "previous": the newest of them with another digest that finished before this digest's
own build (or, when this digest's build is not in the evidence, before the report). Its
report is built from the same evidence (without a previous of its own), so both sides are
read the same way: `facts` for versions and base, current check lines for statuses.
"""

from __future__ import annotations

from collections.abc import Callable

from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import BuildResult
from imagekit.report.models import ImageReport, PreviousBuild, StatusChange, VersionChange
from imagekit.results import Status


def _builds(reads: list, name: str, profile: str | None) -> list:
    """PASS build attempts of `name` (and `profile` where both name one), oldest first."""
    found = []
    for read in reads:
        result = read.result
        if read.record.kind != "build" or read.record.status is not Status.PASS or \
                not isinstance(result, BuildResult) or not result.digest or result.name != name:
            continue
        if profile is not None and result.profile is not None and result.profile != profile:
            continue
        found.append(read)
    return sorted(found, key=lambda r: (r.record.finished, r.record.attempt_id))


def previous_read(reads: list, report: ImageReport):  # -> Read | None
    """The previous build's attempt, or None."""
    name = report.facts.name
    if not name:
        return None
    builds = _builds(reads, name, report.profile)
    mine = [r for r in builds if r.result.digest in (report.subject, *report.aliases)]
    until = mine[0].record.finished if mine else report.generated
    earlier = [r for r in builds if r.result.digest not in (report.subject, *report.aliases)
               and r.record.finished < until]
    return earlier[-1] if earlier else None


def version_changes(before: dict[str, str], after: dict[str, str]) -> list[VersionChange]:
    return [VersionChange(package=k, before=before.get(k), after=after.get(k))
            for k in sorted(set(before) | set(after)) if before.get(k) != after.get(k)]


def status_changes(before: ImageReport, after: ImageReport) -> list[StatusChange]:
    """Checks whose current status differs, in this report's order, then those gone."""
    old = {line.test_name: line.status for line in before.checks}
    new = {line.test_name: line for line in after.checks}
    changes = [StatusChange(check=test, before=old.get(test), after=line.status,
                            evidence=line.evidence)
               for test, line in new.items() if old.get(test) is not line.status]
    changes += [StatusChange(check=test, before=status, after=None)
                for test, status in old.items() if test not in new]
    return changes


def previous_build(store: EvidenceStore, reads: list, report: ImageReport,
                   build: Callable[..., ImageReport]) -> PreviousBuild | None:
    """The difference against the previous build, or None when there is none in evidence.
    `build` is `collect.build_report` (passed in: collect, which reads the store, imports this
    module, never the other way)."""
    read = previous_read(reads, report)
    if read is None:
        return None
    digest = read.result.digest
    earlier = build(store, digest, name=report.facts.name, profile=report.profile,
                    accepted=report.accepted, reads=reads, with_previous=False)
    return PreviousBuild(
        digest=digest, built=read.record.finished,
        evidence=str(store.path_of(read.record).relative_to(store.root)),
        base_before=earlier.facts.base_digest, base_after=report.facts.base_digest,
        probed=bool(earlier.facts.versions and report.facts.versions),
        versions=version_changes(earlier.facts.versions, report.facts.versions)
        if earlier.facts.versions and report.facts.versions else [],
        checks=status_changes(earlier, report))
