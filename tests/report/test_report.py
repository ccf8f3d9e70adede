"""The report of a stand-in rehearsal's evidence: every section filled from evidence, or says
'no evidence' when there is none."""

from __future__ import annotations

import json

import pytest

from imagekit.errors import InvalidInput, NotFound
from imagekit.evidence import kinds
from imagekit.report import build_report, render
from imagekit.report.collect import ATTEMPT_LINE
from imagekit.results import CheckResult, Status
from tests.report.conftest import P, fake_digest, write_rehearsal


def test_report_collects_every_section(rehearsal) -> None:
    report = build_report(rehearsal.store, rehearsal.digest)
    assert report.subject == rehearsal.digest
    assert rehearsal.image_id in report.aliases          # probes keyed by the image ID belong
    assert report.status is Status.PASS
    assert report.facts.versions["pillow"] == "11.3.0"
    assert report.facts.versions["nixl-cu12"] == "1.2.0"
    assert report.facts.base_digest == rehearsal.base
    assert report.facts.fix_layers == [
        "python3 -m pip install --no-cache-dir nixl-cu12==1.2.0 pillow==11.3.0"]
    names = {line.test_name for line in report.checks}
    assert {"probe:pip_check", "probe:torch_arch", "build:push", "images-verify:manifest",
            "accept-media:corrupted-media-status", "bench:totals"} <= names
    for line in report.checks:                     # each check points at a real attempt
        assert (rehearsal.store.root / line.evidence / "attempt.json").is_file()
    assert {(e.reference, e.digest) for e in report.endpoints} == \
        set(rehearsal.endpoints.values())
    assert {e.endpoint for e in report.endpoints} >= {"127.0.0.1:5002", "127.0.0.1:5003"} or \
        all("(" in e.endpoint for e in report.endpoints)         # named when infra state exists
    by_reference = {e.reference: e for e in report.endpoints}
    assert by_reference[rehearsal.endpoints["staging"][0]].verified is None   # the source
    assert all(by_reference[rehearsal.endpoints[n][0]].verified for n in ("production", "target"))
    [preflight] = report.preflight
    assert preflight.world_size == 8 and preflight.backend == "nccl"
    assert [p.bytes for p in preflight.sizes] == [2 ** n for n in range(10, 31, 4)]
    assert all(p.busbw_GBps is not None for p in preflight.sizes)
    series = {(s.label, s.metric): s for s in report.latency}
    assert set(series) == {(f"round-0{i}-text-c{c}", m) for i, c in ((1, 1), (2, 4))
                           for m in ("ttft", "itl", "e2e")}
    ttft = series[("round-02-text-c4", "ttft")]
    assert ttft.percentiles == pytest.approx({"p50": 0.2, "p90": 0.34, "p99": 0.64})
    assert ttft.unit == "s" and ttft.kind == "bench"
    assert all(o.satisfied for o in report.required)


def test_broken_attempt_is_history_not_hidden(rehearsal) -> None:
    report = build_report(rehearsal.store, rehearsal.digest)
    [broken] = [line for line in report.history if line.name == ATTEMPT_LINE]
    assert broken.kind == "probe" and broken.status is Status.ERROR
    assert "container exited" in broken.detail
    assert not broken.current


def test_an_attempt_that_breaks_last_is_current(store) -> None:
    r = write_rehearsal(store)
    with pytest.raises(RuntimeError), store.attempt(r.image_id, "probe"):
        raise RuntimeError("docker daemon went away")
    report = build_report(store, r.digest)
    assert report.status is Status.ERROR
    assert any(line.name == ATTEMPT_LINE and line.current for line in report.checks)


def test_markdown_names_versions_paths_endpoints(rehearsal) -> None:
    report = build_report(rehearsal.store, rehearsal.digest)
    text = render(report, "md")
    assert "| pillow | 11.3.0 |" in text
    assert rehearsal.base in text
    assert "nixl-cu12==1.2.0 pillow==11.3.0" in text
    for reference, digest in rehearsal.endpoints.values():
        # the digest in full once (its first appearance), short after that
        assert f"`{reference}` | `{digest}`" in text or \
            f"`{reference}` | `{digest[:19]}…`" in text
    for line in report.checks:
        assert f"`{line.evidence}`" in text
    assert "## GPU preflight" in text and "| 1 GiB |" in text
    assert "| bench | round-02-text-c4 | ttft | PASS | s | 0.2 | 0.34 | 0.64 |" in text


def test_sections_without_evidence_say_so(store) -> None:
    r = write_rehearsal(store, "vllm", promote=False, preflight=False)
    report = build_report(store, r.digest)
    assert report.endpoints == [] and report.preflight == []
    text = render(report, "md")   # one line for the phase not run, no empty headings
    assert "- promotion: not run by this store; signed statements: none" in text
    assert "## Promotion endpoints" not in text and "## GPU preflight" not in text
    assert "No evidence" not in text


def test_missing_required_check_is_not_a_pass(rehearsal) -> None:
    report = build_report(rehearsal.store, rehearsal.digest,
                          required=["probe", "accept-needle"])
    [needle] = [o for o in report.required if o.requirement == "accept-needle"]
    assert not needle.satisfied and needle.status is None
    assert report.status is Status.FAIL


def test_deferred_required_check_is_not_a_pass(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.DEFERRED)
    report = build_report(store, r.digest, required=["probe:torch_arch"])
    [outcome] = report.required
    assert not outcome.satisfied and outcome.status is Status.DEFERRED
    assert report.status is Status.FAIL
    lenient = build_report(store, r.digest, required=["probe:pip_check"])
    assert lenient.status is Status.DEFERRED


def test_required_from_environment(rehearsal, monkeypatch) -> None:
    from imagekit.settings import load

    monkeypatch.setenv("IMAGEKIT_REQUIRED_CHECKS", "probe:pip_check, accept-needle")
    report = build_report(rehearsal.store, rehearsal.digest,
                          required=load().required_checks_list())  # what the CLI passes
    assert [o.requirement for o in report.required] == ["probe:pip_check", "accept-needle"]


def test_bad_required_and_unknown_digest(rehearsal) -> None:
    with pytest.raises(InvalidInput):
        build_report(rehearsal.store, rehearsal.digest, required=["probe:"])
    with pytest.raises(NotFound):
        build_report(rehearsal.store, fake_digest("nothing"))


def test_other_images_evidence_is_not_mixed_in(store) -> None:
    sglang = write_rehearsal(store, "sglang")
    write_rehearsal(store, "vllm", media_fail=True)
    report = build_report(store, sglang.digest)
    assert report.status is Status.PASS
    assert all(line.key in {sglang.digest, sglang.image_id, "name:sglang-fixed"}
               for line in report.checks)


def test_json_round_trips(rehearsal) -> None:
    from imagekit.report.models import ImageReport
    report = build_report(rehearsal.store, rehearsal.digest)
    again = ImageReport.model_validate(json.loads(render(report, "json")))
    assert again == report


def test_a_manifest_about_several_images_judges_none_of_them(store) -> None:
    """The whole spec's image manifest (images-manifest) lists each image; it names no subject,
    so its checks are not attributed to any one image (each has its own images-verify)."""
    sglang = write_rehearsal(store, "sglang")
    vllm = write_rehearsal(store, "vllm")
    with store.attempt("images-local", "images-manifest") as a:
        a.write_result(kinds.ImagesManifestResult(profile="local", verdict=Status.FAIL, images=[
            kinds.ManifestImage(image="vllm", digest=vllm.digest, verdict=Status.FAIL),
            kinds.ManifestImage(image="sglang", digest=sglang.digest, verdict=Status.PASS)]))
        a.add_check(CheckResult(name="vllm", status=Status.FAIL))
    report = build_report(store, sglang.digest)
    assert all(line.key != "name:images-local" for line in report.checks)
    assert report.facts.versions["pillow"] == "11.3.0"


def test_every_attempt_has_its_kinds_result(rehearsal) -> None:
    """The synthetic evidence is written as the producers write it: each attempt (but the one
    that broke) carries the result model of its kind."""
    from imagekit.evidence import model_for
    from imagekit.report.collect import read_all

    reads = read_all(rehearsal.store)
    assert reads and all(r.record.layout == 2 for r in reads)
    for read in reads:
        if read.record.status is not Status.ERROR:
            assert read.record.result is not None, read.record.kind
            assert isinstance(read.result, model_for(read.record.kind)), read.record.kind


def test_summary_by_kind(store) -> None:
    r = write_rehearsal(store, media_fail=True, torch_arch=Status.DEFERRED)
    report = build_report(store, r.digest)
    rows = {row["kind"]: row for row in report.summary()}
    assert rows["probe"]["PASS"] == 4 and rows["probe"]["DEFERRED"] == 1
    assert rows["accept-media"]["FAIL"] == 1 and rows["accept-media"]["PASS"] == 1
    assert "| accept-media | 1 | 1 | 0 | 0 | 0 |" in render(report, "md")


def test_an_endpoint_serving_another_digest_is_marked(store) -> None:
    r = write_rehearsal(store, promote=False)
    other = fake_digest("re-encoded")
    with store.attempt(r.digest, "promote") as a:
        a.write_result(kinds.PromoteEvidence(source="127.0.0.1:5001/x:t", digest=r.digest,
                                             hops=[kinds.HopEvidence(
                                                 endpoint="127.0.0.1:5003/x:t",
                                                 registry="127.0.0.1:5003", digest=other,
                                                 verified=True)]))
        a.add_check(P("hop-1"))
    text = render(build_report(store, r.digest), "md")
    assert f"`{other}` **(not the image digest)**" in text
    assert f"`{r.digest}` **(not" not in text
