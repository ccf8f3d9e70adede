"""The runs of the committed old-layout store, written again by today's producers (their
record functions where they have one, else the same subjects and result models they write)."""

from __future__ import annotations

from imagekit.evidence import EvidenceStore, Role, Subject
from imagekit.evidence.kinds import (
    AcceptResult,
    BenchResult,
    BuildResult,
    GateDecision,
    ProbeResult,
)
from imagekit.results import CheckResult, Status
from tests.report.legacy.inputs import (
    BUILD,
    DIGEST,
    ENTRY,
    IMAGE_ID,
    PREFLIGHT_SAMPLE,
    PROBE_CHECKS,
    PROMOTE,
    VERIFY_COPY,
    VERSIONS,
    bench_rounds,
)


def write_runs(store: EvidenceStore, *, override: GateDecision) -> None:
    from imagekit.acceptance.models import RoundResult
    from imagekit.acceptance.runner import bench_latency
    from imagekit.build.builder import KIND, evidence_name
    from imagekit.gpu.evidence import record_preflight
    from imagekit.imagesverify.run import cache_name, entry_result, entry_subjects
    from imagekit.promote.run import _evidence as promote_evidence
    from imagekit.report.collect import build_report
    from imagekit.report.gate import record_override
    from imagekit.report.render import record_report
    from imagekit.verify.copy import record_evidence

    record = BUILD
    build = BuildResult(name="sglang", profile="local", engine="sglang", base=str(record.base),
                        base_digest=str(record.base.digest), image_id=str(IMAGE_ID),
                        digest=str(DIGEST), reference=str(record.reference),
                        local_tag=record.local_tag, cache_key=record.cache_key,
                        seconds=record.seconds)
    subjects = [Subject.of(DIGEST, Role.SUBJECT, str(record.reference)),
                Subject.of(IMAGE_ID, Role.ALIAS), Subject.of(record.base.digest, Role.BASE)]
    with store.attempt(evidence_name("sglang"), KIND, subjects=subjects[2:]) as attempt:
        attempt.write_json("build.json", record)
        attempt.add_subject(DIGEST, Role.SUBJECT, str(record.reference))
        attempt.add_subject(IMAGE_ID, Role.ALIAS)
        attempt.write_result(build)
        attempt.add_check(CheckResult(name="build", status=Status.PASS,
                                      detail=f"{record.local_tag} {record.image_id.short} "
                                             f"pushed {record.reference}"))
    with store.attempt(DIGEST, KIND, subjects=subjects) as attempt:
        attempt.write_json("build.json", record)
        attempt.write_result(build)
        attempt.add_check(CheckResult(name="build", status=Status.PASS,
                                      detail=f"{record.reference}"))
    with store.attempt(IMAGE_ID, "probe") as attempt:
        attempt.write_result(ProbeResult(image=record.local_tag,
                                         probes=[c.name for c in PROBE_CHECKS],
                                         versions=VERSIONS))
        for check in PROBE_CHECKS:
            attempt.add_check(check)
    for subject in (DIGEST, cache_name("local", "sglang")):
        with store.attempt(subject, "images-verify", subjects=entry_subjects(ENTRY)) as a:
            a.write_result(entry_result(ENTRY))
            for check in ENTRY.checks:
                a.add_check(check)
            a.finish(ENTRY.verdict, summary="sglang: verdict")
    record_evidence(store, VERIFY_COPY)
    context = {"source": PROMOTE.source, "via": [PROMOTE.hops[0].endpoint],
               "to": PROMOTE.hops[-1].endpoint, "all_platforms": False}
    with store.attempt(DIGEST, "promote", **context) as attempt:
        attempt.write_result(promote_evidence(PROMOTE.source, PROMOTE.digest, context,
                                              PROMOTE.hops))
        for index, hop in enumerate(PROMOTE.hops):
            attempt.add_check(CheckResult(
                name=f"hop-{index + 1}", status=Status.PASS if hop.verified else Status.FAIL,
                detail=f"{hop.endpoint} serves {hop.digest}: {hop.read_back}"))
    record_preflight(PREFLIGHT_SAMPLE, store, digest=DIGEST)
    for suite, checks in (("functional", [CheckResult(name="thinking-modes", status=Status.PASS),
                                          CheckResult(name="tool-call", status=Status.PASS)]),
                          ("media", [CheckResult(name="corrupted-media-status",
                                                 status=Status.FAIL,
                                                 detail="invalid PNG returned 500")])):
        with store.attempt(str(DIGEST), f"accept-{suite}") as a:
            a.write_result(AcceptResult(kind=f"accept-{suite}", suite=suite,
                                        base_url="http://127.0.0.1:5185/v1", model="m",
                                        engine="sglang", engine_version="0.5.6"))
            for check in checks:
                a.add_check(check)
    rounds = [RoundResult.model_validate(r) for r in bench_rounds()]
    with store.attempt(str(DIGEST), "bench") as a:
        a.write_result(BenchResult(matrix="main", rounds=len(rounds), requests=240,
                                   base_url="http://127.0.0.1:5185/v1", model="m",
                                   engine="sglang", engine_version="0.5.6",
                                   latency=bench_latency(rounds)))
        for check in [CheckResult(name=f"round-{r.spec.index:02d}", status=Status.PASS)
                      for r in rounds] + [CheckResult(name="totals", status=Status.PASS,
                                                      detail="0 errors")]:
            a.add_check(check)
    # the override ran on the decision of its day (then tainted by the copy's comparison)
    record_override(store, DIGEST, "legacy store: forced once", user="legacy", decision=override)
    record_report(store, build_report(store, DIGEST, profile="local"))
