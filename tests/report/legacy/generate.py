"""Made the committed old-layout store (`tests/report/legacy/store/`) with the code of commit
c7eb165, before the evidence layout changed. Kept as the record of how it was made;
it is NOT rerun by the tests (today's producers write the new layout).

The runs: one image `sglang` built (by name and by digest), probed by its image ID, verified
by `images verify`, compared against a lying copy (verify-copy, layer content FAIL), promoted
over two hops, a GPU preflight sample recorded, acceptance and bench attempts, a forced gate
override and an archived report. Inputs are fixed (see `inputs()`), so
`tests/report/legacy/runs.py` can write "the same runs" with today's producers.

    PYTHONPATH=. .venv/bin/python tests/report/legacy/generate.py tests/report/legacy/store
"""

from __future__ import annotations

import sys
from pathlib import Path

from imagekit.evidence import EvidenceStore
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


def generate(root: Path) -> None:
    from imagekit.build.builder import KIND, evidence_name
    from imagekit.gpu.evidence import record_preflight
    from imagekit.imagesverify.run import cache_name
    from imagekit.report.collect import build_report
    from imagekit.report.gate import record_override
    from imagekit.report.render import record_report
    from imagekit.verify.copy import record_evidence

    store = EvidenceStore(root)
    record = BUILD
    # imagekit/build/builder.py build_image (c7eb165): by name, then by digest
    with store.attempt(evidence_name("sglang"), KIND, profile="local",
                       cache_key=record.cache_key, base=str(record.base),
                       build_args=record.build_args) as attempt:
        attempt.write_text("build.log", "#12 DONE 35.2s\n")
        attempt.write_json("build-outcome.json", {"ok": True, "returncode": 0,
                                                  "seconds": record.seconds,
                                                  "image_id": str(record.image_id)})
        attempt.write_json("build.json", record)
        attempt.add_check(CheckResult(name="build", status=Status.PASS,
                                      detail=f"{record.local_tag} {record.image_id.short} "
                                             f"pushed {record.reference}"))
    with store.attempt(record.digest, KIND, name="sglang", profile="local") as by_digest:
        by_digest.write_text("build.log", "#12 DONE 35.2s\n")
        by_digest.write_json("build.json", record)
        by_digest.add_check(CheckResult(name="build", status=Status.PASS,
                                        detail=f"{record.reference}"))
    # imagekit/probe/runner.py probe_image (c7eb165): keyed by the image ID
    with store.attempt(IMAGE_ID, "probe", image=record.local_tag,
                       probes=[c.name for c in PROBE_CHECKS], probes_version="1" * 64) as a:
        for check in PROBE_CHECKS:
            a.write_text(f"probes/{check.name}.stdout", "{}\n")
        a.write_json("checks.json", [c.model_dump(mode="json") for c in PROBE_CHECKS])
        a.write_json("versions.json", VERSIONS)
        for check in PROBE_CHECKS:
            a.add_check(check)
    # imagekit/imagesverify/run.py verify_one (c7eb165): by digest and by cache name
    for subject in (DIGEST, cache_name("local", "sglang")):
        with store.attempt(subject, "images-verify", verify_key=ENTRY.verify_key,
                           digest=ENTRY.digest, image_id=ENTRY.image_id, cached=False) as a:
            a.write_json("entry.json", ENTRY)
            for check in ENTRY.checks:
                a.add_check(check)
            a.finish(ENTRY.verdict, summary=f"sglang: verdict {ENTRY.verdict.value} "
                                            f"({len(ENTRY.accepted)} accepted)")
    # imagekit/verify/copy.py record_evidence (c7eb165): keyed by the OFFICIAL digest
    record_evidence(store, VERIFY_COPY)
    # imagekit/promote/run.py run_promote (c7eb165)
    context = {"source": PROMOTE.source, "via": [PROMOTE.hops[0].endpoint],
               "to": PROMOTE.hops[-1].endpoint, "all_platforms": False}
    with store.attempt(DIGEST, "promote", **context) as attempt:
        attempt.write_json("result.json", PROMOTE)
        for index, hop in enumerate(PROMOTE.hops):
            attempt.add_check(CheckResult(
                name=f"hop-{index + 1}", status=Status.PASS if hop.verified else Status.FAIL,
                detail=f"{hop.endpoint} serves {hop.digest}: {hop.read_back}",
                data=hop.model_dump(mode="json")))
        attempt.finish(summary=f"{len(PROMOTE.hops)} hop(s) verified, "
                               f"{sum(h.bytes_moved for h in PROMOTE.hops)} bytes moved")
    # imagekit/gpu/evidence.py record_preflight (c7eb165)
    record_preflight(PREFLIGHT_SAMPLE, store, digest=DIGEST)
    # imagekit/acceptance/runner.py run_suites / run_matrix shapes (c7eb165)
    for suite, checks in (("functional", [CheckResult(name="thinking-modes", status=Status.PASS),
                                          CheckResult(name="tool-call", status=Status.PASS)]),
                          ("media", [CheckResult(name="corrupted-media-status",
                                                 status=Status.FAIL,
                                                 detail="invalid PNG returned 500")])):
        with store.attempt(str(DIGEST), f"accept-{suite}", base_url="http://127.0.0.1:5185/v1",
                           model="m", engine="sglang", engine_version="0.5.6",
                           suite=suite, options={}) as a:
            for check in checks:
                a.add_check(check)
            a.write_json("checks.json", [c.model_dump(mode="json") for c in checks])
            a.write_text("report.md", f"# Acceptance suite {suite}\n")
    rounds = bench_rounds()
    with store.attempt(str(DIGEST), "bench", base_url="http://127.0.0.1:5185/v1", model="m",
                       engine="sglang", engine_version="0.5.6", matrix="main",
                       rounds=len(rounds), requests=sum(r["spec"]["requests"] for r in rounds)
                       ) as a:
        a.write_text("matrix.toml", "name = 'main'\n")
        a.write_json("calibration.json", {"note": "calibrated"})
        for r in rounds:
            a.write_json(f"rounds/{r['spec']['index']:02d}-result.json", r)
        checks = [CheckResult(name=f"round-{r['spec']['index']:02d}", status=Status.PASS)
                  for r in rounds] + [CheckResult(name="totals", status=Status.PASS,
                                                  detail="0 errors")]
        for check in checks:
            a.add_check(check)
        a.write_json("checks.json", [c.model_dump(mode="json") for c in checks])
    # imagekit/report/gate.py record_override and render.record_report (c7eb165)
    record_override(store, DIGEST, "legacy store: forced once", user="legacy")
    record_report(store, build_report(store, DIGEST, profile="local"))


if __name__ == "__main__":
    generate(Path(sys.argv[1]))
