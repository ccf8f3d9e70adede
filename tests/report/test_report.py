"""The report of a stand-in rehearsal's evidence: every section filled from evidence, or says
'no evidence' when there is none."""

from __future__ import annotations

import json

import pytest

from imagekit.errors import InvalidInput, NotFound
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
    assert all(e.verified for e in report.endpoints)
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
    with pytest.raises(RuntimeError):
        with store.attempt(r.image_id, "probe"):
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
        assert f"`{reference}` | `{digest}`" in text
    for line in report.checks:
        assert f"`{line.evidence}`" in text
    assert "## GPU preflight" in text and "| 1 GiB |" in text
    assert "| bench | round-02-text-c4 | ttft | PASS | s | 0.2 | 0.34 | 0.64 |" in text


def test_sections_without_evidence_say_so(store) -> None:
    r = write_rehearsal(store, "vllm", promote=False, preflight=False)
    report = build_report(store, r.digest)
    assert report.endpoints == [] and report.preflight == []
    text = render(report, "md")
    assert "No evidence (not promoted)." in text
    assert "## GPU preflight\n\nNo evidence." in text


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
    monkeypatch.setenv("IMAGEKIT_REQUIRED_CHECKS", "probe:pip_check, accept-needle")
    report = build_report(rehearsal.store, rehearsal.digest)
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


def test_a_manifest_covering_several_images_gives_each_its_own_facts(store) -> None:
    sglang = write_rehearsal(store, "sglang")
    vllm = write_rehearsal(store, "vllm")
    with store.attempt(sglang.digest, "images-verify", all_images=True) as a:
        a.write_json("images.json", {"images": [
            {"image": "vllm", "digest": vllm.digest, "base_digest": vllm.base,
             "versions": [{"name": "av", "version": "16.1.0"}, {"name": "vllm",
                                                                 "version": "0.11.0"}],
             "fix_layers": ["apt-get remove -y python3-gi python3-software-properties "
                            "software-properties-common"]},
            {"image": "sglang", "digest": sglang.digest, "base_digest": sglang.base,
             "versions": [{"name": "pillow", "version": "11.3.0"}],
             "fix_layers": ["pip install nixl-cu12==1.2.0 pillow==11.3.0"]}]})
        a.add_check(P("manifest"))
    facts = build_report(store, sglang.digest).facts
    assert facts.versions == {"pillow": "11.3.0"}
    assert facts.base_digest == sglang.base and facts.name == "sglang"
    assert facts.fix_layers == ["pip install nixl-cu12==1.2.0 pillow==11.3.0"]


def test_facts_from_a_name_keyed_record_about_all_images(store) -> None:
    sglang = write_rehearsal(store, "sglang")
    vllm = write_rehearsal(store, "vllm")
    with store.attempt("images", "images-verify") as a:
        a.write_json("images.json", {"images": [
            {"image": "vllm", "digest": vllm.digest, "versions": {"vllm": "0.11.0"}},
            {"image": "sglang", "digest": sglang.digest, "versions": {"sglang": "0.5.6"}}]})
        a.add_check(CheckResult(name="vllm/pip_check", status=Status.FAIL))
    report = build_report(store, sglang.digest)
    assert report.facts.versions["sglang"] == "0.5.6" and "vllm" not in report.facts.versions
    assert all(line.key != "name:images" for line in report.checks)   # checks not attributed


def test_synthetic_evidence_has_the_producers_shapes(rehearsal) -> None:
    """The stand-in evidence is what the real producers write: their models accept it, so a
    change of shape there shows up here."""
    from imagekit.acceptance.models import RoundResult
    from imagekit.promote.copy import PromoteResult

    store = rehearsal.store
    [promote] = store.attempts(rehearsal.digest, "promote")
    PromoteResult.model_validate_json((store.path_of(promote) / "result.json").read_text())
    [bench] = store.attempts(rehearsal.digest, "bench")
    for entry in bench.files:
        RoundResult.model_validate_json((store.path_of(bench) / entry.path).read_text())


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
        a.write_json("result.json", {"source": "127.0.0.1:5001/x:t", "digest": r.digest,
                                     "hops": [{"endpoint": "127.0.0.1:5003/x:t",
                                               "registry": "127.0.0.1:5003", "digest": other,
                                               "verified": True}]})
        a.add_check(P("hop-1"))
    text = render(build_report(store, r.digest), "md")
    assert f"`{other}` **(not the image digest)**" in text
    assert f"`{r.digest}` **(not" not in text
