"""Every report leads with one decision, and every status on the page agrees with it: a
promoted image (through a relay), a refused one, and one whose evidence is all signed (the
auditor's empty store that trusts only keys). No internal key, `None` or `?` reaches a person.
"""

from __future__ import annotations

import html as htmllib
import json
import re
from pathlib import Path

import pytest

from imagekit.attest import keys
from imagekit.attest.dsse import bundle_of, sign_envelope
from imagekit.attest.pull import file_attested
from imagekit.attest.verify import verify_trusted
from imagekit.evidence import EvidenceStore, kinds
from imagekit.report import build_report, render
from imagekit.report.accepted import Accepted
from imagekit.report.chain import report_with_trust
from imagekit.report.decision import derive
from imagekit.report.models import ImageReport
from imagekit.results import CheckResult, Status
from imagekit.trust import load_trust, signed_time
from tests.report.conftest import write_rehearsal
from tests.report.test_html import _browser

RELAY, DESTINATION = "127.0.0.1:5004/sglang-fixed:rehearsal", "127.0.0.1:5002/sglang-fixed:rel"


def _via_relay(store: EvidenceStore) -> ImageReport:
    """`promote SRC --via 127.0.0.1:5004/… --to 127.0.0.1:5002/…`, the registries named as
    infra names them (the relay's name sorts after the destination's)."""
    r = write_rehearsal(store, "sglang", promote=False, preflight=False)
    source = f"127.0.0.1:5001/sglang-fixed@{r.digest}"
    hops = [kinds.HopEvidence(endpoint=ref, registry=ref.split("/")[0], digest=r.digest,
                              verified=True, bytes_moved=1024, read_back="hashed")
            for ref in (RELAY, DESTINATION)]
    with store.attempt(r.digest, "promote") as a:
        a.write_result(kinds.PromoteEvidence(source=source, digest=r.digest, via=[RELAY],
                                             to=DESTINATION, hops=hops))
        for n, hop in enumerate(hops, 1):
            a.add_check(CheckResult(name=f"hop-{n}", status=Status.PASS,
                                    detail=f"{hop.endpoint} serves {r.digest}"))
    report = build_report(store, r.digest, state_dir=store.root / "no-infra")
    names = {"127.0.0.1:5001": "staging", "127.0.0.1:5004": "referrers",
             "127.0.0.1:5002": "production"}
    return report.model_copy(update={"endpoints": [
        e.model_copy(update={"endpoint": f"{names[e.endpoint]} ({e.endpoint})"})
        for e in report.endpoints]})


def _text(page: str) -> str:
    """What a person reads of a page: the body's text, tags and the script gone."""
    body = page.split("<body>", 1)[1]
    body = re.sub(r"<script>.*?</script>", "", body, flags=re.S)
    return htmllib.unescape(re.sub(r"<[^>]+>", " ", body))


def _first_lines(report: ImageReport) -> dict[str, str]:
    md = render(report, "md")
    page = render(report, "html")
    return {"md": md.splitlines()[0].strip("*"),
            "html": " ".join(_text(page).split("Next:")[0].split()),
            "json": json.loads(render(report, "json"))["decision"]["summary"],
            "json-first-key": next(iter(json.loads(render(report, "json"))))}


def test_promoted_through_a_relay_names_the_destination_everywhere(store) -> None:
    report = _via_relay(store)
    decision = derive(report)
    assert decision.verdict == "promoted" and decision.may_promote
    assert decision.destination == DESTINATION.rsplit(":", 1)[0] + "@" + report.subject
    first = _first_lines(report)
    assert first["json-first-key"] == "decision"
    assert first["md"] == first["html"] == first["json"] == decision.summary
    assert decision.summary.startswith("promoted to 127.0.0.1:5002/sglang-fixed@sha256:")
    md = render(report, "md")
    # Next names the destination, never the relay; the path is drawn in hop order
    assert f"Next: `deploy {decision.destination} (pinned by digest)`" in md
    assert "5004" not in md.split("## Checks")[0].split("Promotion path")[0]
    path = md.split("**Promotion path (in hop order):**", 1)[1].splitlines()[0]
    assert path.index("staging") < path.index("referrers") < path.index("production"), path
    page = render(report, "html")
    order = [m for m in re.findall(r">(staging|referrers|production)<", page)]
    assert order[:3] == ["staging", "referrers", "production"], order
    endpoints = md.split("## Promotion endpoints (in hop order)", 1)[1]
    assert endpoints.index("5001") < endpoints.index("5004") < endpoints.index("5002")
    # the gate section and the checks row agree with it
    assert "## Promotion gate\n\n**Allowed: promoted**" in md
    assert "PASS</span> Allowed: promoted" in page
    assert "nothing promoted" not in md.lower() and "Overall" not in md
    assert re.search(r"- \*\*Checks:\*\* \d+ PASS\n", md)


def test_a_refused_image_says_so_in_every_status(store) -> None:
    r = write_rehearsal(store, media_fail=True)
    report = build_report(store, r.digest)
    decision = derive(report)
    assert not decision.may_promote and decision.verdict == "not promotable"
    first = _first_lines(report)
    assert first["md"] == first["html"] == first["json"] == decision.summary
    assert decision.summary.startswith(
        "not promotable: accept-media:corrupted-media-status FAIL: invalid PNG")
    md, page = render(report, "md"), render(report, "html")
    assert "**Refused: accept-media:corrupted-media-status FAIL" in md
    assert "FAIL</span> Refused: accept-media" in page
    assert 'class="banner stop"' in page and 'data-allowed="no"' in page
    assert "Allowed" not in md and "promotable:" not in md.replace("not promotable:", "")
    assert "- **Checks:** " in md and " 1 FAIL" in md.split("- **Checks:** ", 1)[1].split("\n")[0]
    assert json.loads(render(report, "json"))["decision"]["reasons"] == report.gate.reasons


# -- the auditor: an empty store that trusts only keys ----------------------------------------

TR = "https://in-toto.io/attestation/test-result/v0.1"
PROMO = "https://imagekit.dev/attestation/promotion/v0.1"
PROBE = "https://imagekit.dev/attestation/cluster-probe/v0.1"


@pytest.fixture(scope="module")
def ci_key(tmp_path_factory):
    return keys.generate(tmp_path_factory.mktemp("ci-key"))


def _sign_into(store, statement: dict, pair, trust, n: int, digest: str) -> None:
    key = keys.load_private(pair[0])
    found, signer = verify_trusted(bundle_of(sign_envelope(statement, key), key), trust)
    file_attested(store, digest, {
        "type": found["predicateType"], "referrer": "sha256:" + str(n) * 64,
        "bundle": "sha256:" + "e" * 64, "statement": found, "signer": signer.name,
        "fingerprint": signer.fingerprint, "label": signer.label,
        "signed_at": signed_time(found)}, "127.0.0.1:5002", "imagekit/sglang")


def _auditor(tmp_path: Path, ci_key, *, cluster: bool = False) -> ImageReport:
    digest = "sha256:" + "ab" * 32
    store = EvidenceStore(tmp_path / "auditor")
    public = tmp_path / "ci.pub"
    public.write_bytes(ci_key[1].read_bytes())
    trust = load_trust([public], env={})
    subject = [{"name": "127.0.0.1:5002/imagekit/sglang", "digest": {"sha256": "ab" * 32}}]
    when = "2026-12-01T12:00:00+00:00"
    _sign_into(store, {"_type": "https://in-toto.io/Statement/v1", "subject": subject,
                       "predicateType": TR, "predicate": {
                           "result": "PASSED", "configuration": [], "warnedTests": [],
                           "passedTests": ["probe:pip_check", "images-verify:verdict"],
                           "failedTests": [], "timestamp": when, "acceptances": []}},
               ci_key, trust, 1, digest)
    hops = [{"endpoint": ref, "digest": digest, "verified": True, "read_back": "hashed"}
            for ref in ("127.0.0.1:5001/imagekit/sglang:r", "127.0.0.1:5004/imagekit/sglang:r",
                        "127.0.0.1:5002/imagekit/sglang:r")]
    _sign_into(store, {"_type": "https://in-toto.io/Statement/v1", "subject": subject,
                       "predicateType": PROMO, "predicate": {
                           "digest": digest, "media_type": "x", "hops": hops,
                           "links": [{"name": "hops", "status": "PASS"}],
                           "required": ["hops"], "generated": when}}, ci_key, trust, 2, digest)
    if cluster:
        _sign_into(store, {"_type": "https://in-toto.io/Statement/v1", "subject": subject,
                           "predicateType": PROBE, "predicate": {
                               "status": "FAIL", "verdict": "PASS", "cluster": "kind",
                               "generated": when}}, ci_key, trust, 3, digest)
    return report_with_trust(store, digest, trust, None, requested=digest)


def test_the_auditors_signed_only_report_agrees_with_its_signed_hops(tmp_path, ci_key) -> None:
    report = _auditor(tmp_path, ci_key)
    assert report.checks == [] and report.gate.allowed, report.gate.reasons
    decision = derive(report)
    assert decision.verdict == "promoted"
    assert decision.destination == "127.0.0.1:5002/imagekit/sglang@" + report.subject
    assert decision.summary.startswith("promoted to 127.0.0.1:5002/imagekit/sglang@sha256:abab")
    assert "statements signed by ci" in decision.summary
    first = _first_lines(report)
    assert first["md"] == first["html"] == first["json"] == decision.summary
    md = render(report, "md")
    assert "nothing promoted" not in md.lower()
    assert f"deploy {decision.destination}" in md
    # phases this store did not run: one line each, not empty headings
    assert "- image phase: not run by this store; signed statements: test-result by ci" in md
    assert "- cluster phase: not run by this store; signed statements: none" in md
    for heading in ("## Final versions", "## GPU preflight", "## Acceptance latency",
                    "## Fix layers", "## Checks (current)", "## Since the previous build"):
        assert heading not in md
    assert "**Allowed: promoted**" in md
    page = " ".join(_text(render(report, "html")).split())   # the signed chain, hops in order
    assert "Signed chain (from the registry)" in page and "Allowed: promoted" in page
    hops = page.split("promotion signed by ci", 1)[1]
    assert hops.index("hop 1 127.0.0.1:5001") < hops.index("hop 2 127.0.0.1:5004") \
        < hops.index("hop 3 127.0.0.1:5002")


def test_a_signed_raw_status_is_named_raw_beside_its_verdict(tmp_path, ci_key) -> None:
    report = _auditor(tmp_path, ci_key, cluster=True)
    md = render(report, "md")
    probe = md.split("**cluster-probe**", 1)[1].split("\n- **", 1)[0]
    assert "verdict: PASS (raw worst check status: status FAIL" in probe, probe
    assert "\n  - status: FAIL" not in probe


# -- what reaches a person ----------------------------------------------------------------------

#: model field names a person must never read (the JSON report keeps them, for machines)
RAW_KEYS = ("base_digest", "bytes_moved", "attempt_id", "may_promote",
            "fix_layers", "evidence_root", "predicate_type", "signed_at", "budget_source",
            "protocol_detail", "semantic_detail", "override_reason")


def _reports(store, tmp_path, ci_key) -> dict[str, ImageReport]:
    found = {"relay": _via_relay(store)}
    refused = write_rehearsal(store, "refused", media_fail=True, torch_arch=Status.DEFERRED)
    found["refused"] = build_report(store, refused.digest, required=["probe:pip_check"])
    bare = write_rehearsal(store, "bare", promote=False, preflight=False)
    found["bare"] = build_report(store, bare.digest)
    full = write_rehearsal(store, "full")
    found["full"] = build_report(store, full.digest)
    standin = write_rehearsal(store, "standin", torch_arch=Status.FAIL, promote=False)
    found["accepted"] = build_report(store, standin.digest, accepted=[Accepted(
        check="torch_arch", status=Status.FAIL, reason="stand-in CPU torch",
        source="images.toml")])
    assert found["accepted"].gate.allowed and found["accepted"].profile is None
    assert re.fullmatch(r"promotable: \d+ checks pass, 1 accepted FAIL \(torch_arch: stand-in "
                        r"CPU torch\)", derive(found["accepted"]).summary), \
        derive(found["accepted"]).summary
    found["signed"] = _auditor(tmp_path, ci_key, cluster=True)
    return found


def test_no_none_placeholder_or_raw_key_reaches_a_person(store, tmp_path, ci_key) -> None:
    for label, report in _reports(store, tmp_path, ci_key).items():
        for fmt, text in (("md", render(report, "md")), ("html", _text(render(report, "html")))):
            where = f"{label} {fmt}"
            text = text.replace("is not None", "")   # a probe's own detail (Python it ran)
            assert not re.search(r"\bNone\b", text), (where, re.search(r".{60}\bNone\b.{20}",
                                                                         text))
            assert not re.search(r"(^|[\s(])\?($|[\s),])", text, re.M), where
            found = [k for k in RAW_KEYS if k in text]
            assert not found, (where, found)
            # a long digest in full once, short after that
            for digest in set(re.findall(r"sha256:[0-9a-f]{64}", text)):
                assert text.count(digest) == 1, (where, digest, text.count(digest))


@pytest.mark.slow
def test_the_decision_is_the_first_thing_chromium_shows(store, chromium, tmp_path) -> None:
    report = _via_relay(store)
    page = tmp_path / "promoted.html"
    page.write_text(render(report, "html", tmp_path))
    dom = _browser(chromium, tmp_path, page, "--dump-dom", "--window-size=1280,1400")
    body = re.search(r"<body([^>]*)>", dom).group(1)
    first = htmllib.unescape(re.search(r'data-first="([^"]*)"', body).group(1))
    assert first == derive(report).summary, first
    assert 'data-overflow="no"' in body, body
    assert "{{" not in dom and "{%" not in dom and "Undefined" not in dom
    shot = tmp_path / "promoted.png"
    _browser(chromium, tmp_path, page, f"--screenshot={shot}", "--window-size=1280,1400")
    assert shot.stat().st_size > 10_000
