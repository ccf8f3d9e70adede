"""The cluster probe's verdict under a spec profile's accepted statuses.

`imagekit cluster probe` runs the spec's probes in a Pod (checks named `probe:<name>`); the
profile may accept a non-PASS status of a probe (e.g. the stand-in's CPU torch has no sm_90).
Accepted checks keep their real status in the report and the evidence; only this verdict takes
the acceptance, returned with its reason. The CLI turns the verdict into its exit code.
"""

from __future__ import annotations

from imagekit.imagesverify.models import AcceptedCheck
from imagekit.imagesverify.run import judge
from imagekit.results import CheckResult, Status, overall
from imagekit.spec import ImagesSpec


def cluster_probe_verdict(checks: list[CheckResult], spec: ImagesSpec | None, name: str | None,
                          profile: str | None) -> tuple[Status, list[dict]]:
    """(verdict, accepted rows) for the probe's checks; without a spec image, the plain
    worst status and no acceptance."""
    if spec is None or name is None:
        return overall(checks), []
    profile_name, prof = spec.profile(profile)
    renamed = [c.model_copy(update={"name": c.name.removeprefix("probe:")}) for c in checks]
    verdict, accepted = judge(name, renamed, prof.accept)
    return verdict, [_row(a, profile_name) for a in accepted]


def _row(accepted: AcceptedCheck, profile: str) -> dict:
    return {"check": f"probe:{accepted.check}", "status": accepted.status.value,
            "reason": accepted.reason, "profile": profile}


def cluster_probe_exit(checks: list[CheckResult], found, profile: str | None
                       ) -> tuple[int, list[dict]]:
    """`imagekit cluster probe`'s exit code (the verdict above, accepted statuses applied) and
    the accepted rows to show; `found` is (spec, name, image) of a spec image, or None."""
    from imagekit.results import exit_code_for

    spec, name = (found[0], found[1]) if found is not None else (None, None)
    verdict, rows = cluster_probe_verdict(checks, spec, name, profile)
    return exit_code_for([CheckResult(name="verdict", status=verdict)]), rows
