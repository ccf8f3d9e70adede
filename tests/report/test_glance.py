"""The report at a glance: a verdict banner read from the stored gate decision, each
probe once across its phases, the promotion path as an inline SVG, acceptance protocol and
semantic verdicts apart, goodput, and evidence links that open — on a page that needs no
network (checked statically and in headless Debian chromium with networking off)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

from imagekit.acceptance.protocol import combine, failed, passed
from imagekit.evidence import kinds
from imagekit.report import build_report, render
from imagekit.report.render import write_all
from imagekit.results import CheckResult, Status
from tests.report.conftest import write_rehearsal
from tests.report.test_html import _browser


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag, attrs) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href") and v]


def _links(page: str) -> list[str]:
    parser = _Links()
    parser.feed(page)
    return parser.urls


def test_banner_matrix_and_diagram_present_and_page_needs_no_network(rehearsal) -> None:
    report = build_report(rehearsal.store, rehearsal.digest)
    page = render(report, "html")
    assert 'id="verdict"' in page and 'id="check-matrix"' in page
    assert '<svg id="promotion-path" class="diagram"' in page
    assert page.count('<g class="endpoint"') == len(report.endpoints)
    assert f'data-allowed="{"yes" if report.gate.allowed else "no"}"' in page
    urls = _links(page)
    assert urls, "evidence is linked"
    assert not [u for u in urls if re.match(r"(https?:)?//", u)], urls
    assert not re.search(r"""url\(\s*["']?(https?:)?//|@import|<link""", page)


def test_matrix_lists_each_probe_once_with_its_phases(store) -> None:
    r = write_rehearsal(store, torch_arch=Status.FAIL, profile="local")
    with store.attempt(r.digest, "cluster-probe") as a:     # the probes again, in a Pod
        a.write_result(kinds.ClusterProbeResult(reference=f"127.0.0.1:5003/x@{r.digest}"))
        a.add_check(CheckResult(name="resolve", status=Status.PASS))
        a.add_check(CheckResult(name="probe:pip_check", status=Status.PASS))
        a.add_check(CheckResult(name="probe:torch_arch", status=Status.FAIL, detail="cpu"))
    report = build_report(store, r.digest)
    matrix = re.search(r'<table id="check-matrix".*?</table>', render(report, "html"),
                       re.S).group(0)
    rows = re.findall(r"<tr><td>([^<]+)</td>(.*?)</tr>", matrix)
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), names
    assert "probe:torch_arch" not in names and "resolve" in names
    phases = {c.kind for c in report.checks if c.name.endswith("torch_arch")}
    assert phases >= {"probe", "cluster-probe"}
    cells = dict(rows)
    assert cells["torch_arch"].count('class="FAIL"') == len(phases)
    assert cells["resolve"].count('class="PASS"') == 1 and cells["resolve"].count("—") == 2


def test_banner_is_the_stored_gate_decision_never_recomputed(store) -> None:
    r = write_rehearsal(store, media_fail=True)
    refused = build_report(store, r.digest)
    assert not refused.gate.allowed
    page = render(refused, "html")
    assert 'class="banner stop"' in page and '<h2 id="decision">not promotable: ' in page
    assert "corrupted-media-status" in re.search(r'<section id="verdict".*?</section>', page,
                                                  re.S).group(0)
    assert render(refused, "md").startswith("**not promotable: ")
    # the same evidence with a stored decision that allows: the banner follows the decision
    allowed = refused.model_copy(update={"gate": refused.gate.model_copy(
        update={"allowed": True, "reasons": []})})
    page = render(allowed, "html")
    assert "not promotable" not in page and 'data-allowed="yes"' in page
    assert 'class="banner stop"' not in page


def test_acceptance_verdicts_apart_and_goodput(store) -> None:
    r = write_rehearsal(store, preflight=False)
    with store.attempt(r.digest, "accept-functional") as a:
        a.write_result(kinds.AcceptResult(kind="accept-functional", suite="functional"))
        a.add_check(combine("tool-call", passed("200, tool_calls parsed"),
                            failed("called get_weather for Paris, expected Berlin")))
        a.add_check(combine("streaming", passed("SSE chunks, [DONE]"), None))
    with store.attempt(r.digest, "bench") as a:
        a.write_result(kinds.BenchResult(matrix="main", rounds=2, requests=40))
        a.add_check(CheckResult(name="round-01-text-c1", status=Status.PASS, data={
            "goodput": 0.95, "spec": {"slo": {"goodput_floor": 0.9}}}))
        a.add_check(CheckResult(name="round-02-text-c8", status=Status.FAIL, data={
            "goodput": 0.5, "spec": {"slo": {"goodput_floor": 0.9}}}))
        a.add_check(CheckResult(name="round-03-text-r50", status=Status.PASS, data={
            "goodput": 0.2, "saturated": True, "spec": {"slo": {"goodput_floor": 0.9}}}))
    report = build_report(store, r.digest)
    tool = next(a for a in report.acceptance if a.name == "tool-call")
    assert (tool.status, tool.protocol, tool.semantic) == (Status.FAIL, Status.PASS,
                                                           Status.FAIL)
    stream = next(a for a in report.acceptance if a.name == "streaming")
    assert stream.protocol is Status.PASS and stream.semantic is None
    page = render(report, "html")
    section = page.split("<h2>Acceptance: protocol and semantic verdicts</h2>")[1]
    assert "expected Berlin" in section.split("<h2>")[0]
    assert "not judged" in section.split("<h2>")[0]
    assert [(g.goodput, g.saturated) for g in report.goodput] == [
        (0.95, False), (0.5, False), (0.2, True)]
    goodput = re.search(r'<svg id="plot-goodput".*?</svg>', page, re.S).group(0)
    assert goodput.count('class="bar"') == 3 and "floor 90%" in goodput
    # a PASS below its floor says why: the round was past saturation, the floor not judged
    assert goodput.count("past saturation: floor not judged") == 1


def test_evidence_links_open_from_the_written_page(rehearsal, tmp_path) -> None:
    written = write_all(build_report(rehearsal.store, rehearsal.digest), tmp_path / "out")
    page = written["html"]
    urls = _links(page.read_text())
    assert urls
    for url in urls:
        assert not url.startswith(("/", "file:")), url      # relative to the page
        assert (page.parent / unquote(url)).resolve().is_file(), url


def test_page_renders_with_networking_off(rehearsal, chromium, tmp_path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render(build_report(rehearsal.store, rehearsal.digest), "html"))
    dom = _browser(chromium, tmp_path, page, "--dump-dom",
                   "--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9")
    assert 'id="verdict"' in dom and 'id="check-matrix"' in dom
    assert 'id="promotion-path"' in dom
    plots = re.search(r'<body[^>]* data-plots="([^"]*)"', dom).group(1).split(",")
    assert plots and all(p.endswith(":yes") for p in plots), plots
    assert Path(page).stat().st_size < 400_000


def test_diagram_shows_attestations_a_hop_carried(store) -> None:
    r = write_rehearsal(store, promote=False)
    ref = f"127.0.0.1:5002/imagekit/x:t-{r.digest[7:19]}"
    with store.attempt(r.digest, "promote") as a:
        a.write_result(kinds.PromoteEvidence(
            source=f"127.0.0.1:5001/imagekit/x@{r.digest}", digest=r.digest, hops=[
                kinds.HopEvidence(endpoint=ref, registry="127.0.0.1:5002", digest=r.digest,
                                  verified=True, read_back="manifest served; 2 referrers "
                                  "listed and served")]))
        a.add_check(CheckResult(name="hop-1", status=Status.PASS))
    report = build_report(store, r.digest)
    assert [e.referrers for e in report.endpoints if e.reference == ref] == [2]
    diagram = re.search(r'<svg id="promotion-path".*?</svg>', render(report, "html"),
                        re.S).group(0)
    assert "2 attestation(s) carried, read back" in diagram
    assert "no attestation evidence" in diagram          # the source: nothing recorded there


def test_attestation_count_comes_from_the_typed_hop_field(store) -> None:
    """HopEvidence.referrers is what the report reads; the read-back text is only parsed for
    records written before the field existed, and an awaited hop (None) claims nothing."""
    r = write_rehearsal(store, promote=False)
    copied = f"127.0.0.1:5002/imagekit/x:t-{r.digest[7:19]}"
    awaited = f"127.0.0.1:5003/imagekit/x:t-{r.digest[7:19]}"
    with store.attempt(r.digest, "promote") as a:
        a.write_result(kinds.PromoteEvidence(
            source=f"127.0.0.1:5001/imagekit/x@{r.digest}", digest=r.digest, hops=[
                kinds.HopEvidence(endpoint=copied, registry="127.0.0.1:5002", digest=r.digest,
                                  verified=True, read_back="manifest served; 0 referrers",
                                  referrers=["sha256:" + "a" * 64, "sha256:" + "b" * 64,
                                             "sha256:" + "c" * 64]),
                kinds.HopEvidence(endpoint=awaited, registry="127.0.0.1:5003", digest=r.digest,
                                  verified=True, read_back="awaited: served", referrers=None)]))
        a.add_check(CheckResult(name="hop-1", status=Status.PASS))
    counts = {e.reference: e.referrers for e in build_report(store, r.digest).endpoints}
    assert counts[copied] == 3           # the typed field wins over the text's "0 referrers"
    assert counts[awaited] is None


def test_the_report_shows_which_answers_were_judged_and_on_which_model(store) -> None:
    """The auditor sees each judged answer beside what was expected, and the model they were
    judged on: its served name, the cases set (and what it was calibrated on), and the digest
    of each file of the model volume."""
    r = write_rehearsal(store, preflight=False)
    files = {"model.safetensors": "ab" * 32, "tokenizer.json": "cd" * 32}
    sample = {"case": "rep1", "expected": "12", "answer": "7 + 5 = 12.", "correct": True,
              "output_tokens": 10, "latency_s": 0.8}
    with store.attempt(r.digest, "accept-functional") as a:
        a.write_result(kinds.AcceptResult(
            kind="accept-functional", suite="functional", model="HuggingFaceTB/SmolLM2",
            engine="vllm", cases="stand-in", cases_calibrated_on="SmolLM2-135M-Instruct",
            model_files=files))
        check = combine("mode-disabled", passed("3 answers HTTP 200"),
                        passed("3/3 reproductions answered 12"))
        a.add_check(check.model_copy(update={"data": dict(check.data, samples=[sample])}))
        a.add_check(CheckResult(name="tool-calling", status=Status.DEFERRED,
                                detail="not served by this model: needs tools"))
    report = build_report(store, r.digest)
    [judged] = report.judged_on
    assert judged.model == "HuggingFaceTB/SmolLM2" and judged.cases == "stand-in"
    assert judged.model_files == files
    verdict = next(a for a in report.acceptance if a.name == "mode-disabled")
    assert verdict.answer == "'7 + 5 = 12.'" and verdict.expected == "12"
    page = render(report, "md")
    assert "answers judged on **HuggingFaceTB/SmolLM2** (vllm) by the `stand-in` cases " \
           "(calibrated on SmolLM2-135M-Instruct)" in page
    assert "`model.safetensors` sha256:abababababab…" in page
    assert "| '7 + 5 = 12.' | 12 |" in page
    html = render(report, "html")
    assert "<code>tokenizer.json</code> sha256:cdcdcdcdcdcd" in html
