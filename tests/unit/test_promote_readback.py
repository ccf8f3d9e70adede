"""A hop's verdict is its read-back's: the promotion's evidence keeps a hop that read back
other than it was sent as a FAIL with the read-back's words, the run ends with exit 1, and the
reports say "read back: NOT as sent" (never "verified", never "not read back"). The registry
side (a lying registry behind a proxy) is tests/registry/test_promote.py's."""

from __future__ import annotations

import pytest

from imagekit.errors import CheckFailed
from imagekit.evidence import EvidenceStore
from imagekit.oci import Digest, ImageReference
from imagekit.promote import HopNotVerified, HopRecord, PromoteResult
from imagekit.promote import run as promote_run
from imagekit.results import Status

DIGEST = Digest.parse("sha256:" + "ab" * 32)
SOURCE = ImageReference.parse("127.0.0.1:5001/team/app:v1")
HOPS = [ImageReference.parse("127.0.0.1:5002/team/app:v1"),
        ImageReference.parse("127.0.0.1:5003/team/app:v1")]


def _hop(reference: ImageReference, verified: bool, read_back: str) -> HopRecord:
    return HopRecord(endpoint=str(reference), registry=reference.registry,
                     digest=str(DIGEST), verified=verified, bytes_moved=10, blobs_copied=1,
                     blobs_skipped=0, blobs_mounted=0, manifests_pushed=1, seconds=0.1,
                     read_back=read_back)


def _promote_reading_back(*outcomes: tuple[bool, str]):
    """`promote` as copy.promote behaves once each hop's read-back is known: every hop seen
    by on_hop, and a hop not verified ends it with HopNotVerified."""
    def fake(source, via, to, *, gate, on_hop, **_):
        gate(DIGEST)
        hops = []
        for reference, (verified, read_back) in zip([*via, to], outcomes, strict=True):
            hop = _hop(reference, verified, read_back)
            hops.append(hop)
            on_hop(hop)
            if not verified:
                raise HopNotVerified(hop)
        return PromoteResult(source=str(source), digest=str(DIGEST), media_type="x",
                             all_platforms=False, platform=None, hops=hops)
    return fake


def test_a_hop_whose_read_back_differs_is_a_fail_in_evidence_and_exit_1(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    lie = f"tag v1 resolves to sha256:{'0' * 64}, not {DIGEST}"
    monkeypatch.setattr(promote_run, "promote", _promote_reading_back(
        (True, "manifest served; tag v1 -> ok; 2 blobs present"), (False, lie)))
    store = EvidenceStore(tmp_path)
    with pytest.raises(HopNotVerified) as caught:
        promote_run.run_promote(SOURCE, HOPS[:1], HOPS[1], store=store, gate=False)
    assert isinstance(caught.value, CheckFailed) and caught.value.exit_code == 1
    assert lie in caught.value.one_line()
    (record,) = store.attempts(str(DIGEST), "promote")
    assert record.status is Status.FAIL
    assert [(c.name, c.status) for c in record.checks] == [("hop-1", Status.PASS),
                                                          ("hop-2", Status.FAIL)]
    assert record.checks[1].detail == f"{HOPS[1]} does not serve {DIGEST} as sent: {lie}"
    result = store.result(record)
    assert [h.verified for h in result.hops] == [True, False]
    assert result.hops[1].read_back == lie and lie in (result.error or "")

    from imagekit.report import build_report, render

    report = build_report(store, DIGEST)
    by_reference = {e.reference: e.verified for e in report.endpoints}
    assert by_reference[str(HOPS[0])] is True and by_reference[str(HOPS[1])] is False
    assert "(read back: NOT as sent)" in render(report, "md")
    assert 'data-state="not-verified"' in render(report, "html")


def test_hops_whose_read_back_matches_pass(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(promote_run, "promote", _promote_reading_back(
        (True, "manifest served; 2 blobs present"), (True, "manifest served; 2 blobs present")))
    store = EvidenceStore(tmp_path)
    result, _ = promote_run.run_promote(SOURCE, HOPS[:1], HOPS[1], store=store, gate=False)
    assert all(h.verified for h in result.hops)
    (record,) = store.attempts(str(DIGEST), "promote")
    assert record.status is Status.PASS
    assert [(c.name, c.status) for c in record.checks] == [("hop-1", Status.PASS),
                                                          ("hop-2", Status.PASS)]
    report = build_report_md(store)
    assert "(read back: NOT as sent)" not in report and "(verified)" in report


def build_report_md(store: EvidenceStore) -> str:
    from imagekit.report import build_report, render

    return render(build_report(store, DIGEST), "md")


def test_a_hop_that_could_not_be_made_is_an_error_beside_the_hops_before_it(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a read-back that differed but a hop that failed (a registry that refused): ERROR,
    the verified hops before it kept as PASS."""
    from imagekit.errors import Unauthorized

    def refusing(source, via, to, *, gate, on_hop, **_):
        gate(DIGEST)
        on_hop(_hop(via[0], True, "manifest served; 2 blobs present"))
        raise Unauthorized("upload refused: 403 denied", where=str(to))

    monkeypatch.setattr(promote_run, "promote", refusing)
    store = EvidenceStore(tmp_path)
    with pytest.raises(Unauthorized):
        promote_run.run_promote(SOURCE, HOPS[:1], HOPS[1], store=store, gate=False)
    (record,) = store.attempts(str(DIGEST), "promote")
    assert record.status is Status.ERROR
    assert [(c.name, c.status) for c in record.checks] == [("hop-1", Status.PASS),
                                                          ("hop-2", Status.ERROR)]
    assert "upload refused: 403 denied" in record.checks[1].detail
