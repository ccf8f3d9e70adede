"""Evidence in the exact shapes imagekit.build and imagekit.probe write (their own models and
file names), without an engine: the report links the image ID, the pushed digest and the spec
name, reads versions.json and the pinned base, applies the profile's acceptances, and a NAME
resolves through the real `imagekit.build.latest_build`."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from imagekit.build import BuildRecord, latest_build
from imagekit.build.builder import KIND, evidence_name
from imagekit.evidence import Role, Subject, kinds
from imagekit.oci import Digest, ImageReference
from imagekit.report import build_report, check_promotable, render
from imagekit.report.resolve import resolve
from imagekit.results import CheckResult, Status
from tests.report.conftest import fake_digest


@pytest.fixture(autouse=True)
def _spec(spec_file) -> None:
    """Acceptances come from the test's own small spec (tests/report/conftest.py)."""


def _build_and_probe(store, name: str = "sglang", *, torch_arch: Status = Status.FAIL,
                     probe_key: str = "image_id", manifest: bool = True) -> BuildRecord:
    """What build_image + probe_image + images verify record for one pushed image
    (imagekit/build/builder.py, imagekit/probe/runner.py, imagekit/imagesverify/run.py): their
    own files, and the evidence contract's subjects and results."""
    digest, image_id = Digest.parse(fake_digest(f"{name}-m")), Digest.parse(fake_digest(name))
    base = ImageReference.parse(f"127.0.0.1:5001/imagekit-standins/{name}-base@"
                                f"{fake_digest(name + '-base')}")
    record = BuildRecord(
        name=name, profile="local", engine=name, base=base, cache_key="0" * 64,
        local_tag=f"imagekit-local/{name}:0000", image_id=image_id,
        reference=ImageReference.parse(f"127.0.0.1:5001/imagekit/{name}@{digest}"),
        digest=digest, seconds=35.2, built=dt.datetime.now(dt.UTC))
    result = kinds.BuildResult(name=name, profile="local", engine=name, base=str(base),
                               base_digest=str(base.digest), image_id=str(image_id),
                               digest=str(digest), reference=str(record.reference),
                               local_tag=record.local_tag, cache_key="0" * 64, seconds=35.2)
    subjects = [Subject.of(digest, Role.SUBJECT, str(record.reference)),
                Subject.of(image_id, Role.ALIAS), Subject.of(base.digest, Role.BASE, str(base))]
    with store.attempt(evidence_name(name), KIND, subjects=subjects, profile="local",
                       cache_key="0" * 64, base=str(base),
                       build_args={"BASE_IMAGE": str(base)}) as a:
        a.write_text("build.log", "#12 DONE 35.2s\n")
        a.write_json("build.json", record)
        a.write_result(result)
        a.add_check(CheckResult(name="build", status=Status.PASS, detail=str(record.reference)))
    with store.attempt(digest, KIND, subjects=subjects, name=name, profile="local") as a:
        a.write_text("build.log", "#12 DONE 35.2s\n")
        a.write_json("build.json", record)
        a.write_result(result)
        a.add_check(CheckResult(name="build", status=Status.PASS, detail=str(record.reference)))
    key = image_id if probe_key == "image_id" else digest
    checks = [CheckResult(name="pip_check", status=Status.PASS,
                          detail="No broken requirements found."),
              CheckResult(name="torch_arch", status=torch_arch,
                          detail="sm_90 not in torch.cuda.get_arch_list() == []")]
    with store.attempt(key, "probe", image=str(record.reference)) as a:
        a.write_text("probes/pip_check.stdout", "{}\n")
        if probe_key != "image_id":
            a.add_subject(image_id, Role.ALIAS)
        a.write_result(kinds.ProbeResult(
            image=str(record.reference), probes=["pip_check", "torch_arch"],
            versions={"python": "3.11.2", "torch": "2.13.0+cpu", "pillow": "11.3.0",
                      "nixl-cu12": "1.2.0", "av": None}))
        for check in checks:
            a.add_check(check)
    if not manifest:
        return record
    # the image manifest as `imagekit images verify` writes it: keyed by a name, about the
    # image's digests
    with store.attempt(f"images-verify-local-{name}", "images-verify",
                       subjects=subjects[:3]) as a:
        a.write_result(kinds.ImagesVerifyResult(
            image=name, engine=name, profile="local", digest=str(digest),
            image_id=str(image_id), base=str(base), base_digest=str(base.digest),
            fix_layers=["RUN python3 -m pip install --no-cache-dir nixl-cu12==1.2.0 "
                        "pillow==11.3.0 && python3 -m pip check"],
            versions={"python": "3.11.2", "pillow": "11.3.0", "vllm": None},
            verdict=Status.PASS))
        for check in checks:
            a.add_check(check)
    return record


def test_report_links_build_probe_and_spec(store) -> None:
    record = _build_and_probe(store)
    report = build_report(store, record.digest)
    assert str(record.image_id) in report.aliases            # probe keyed by the image ID
    assert report.facts.name == "sglang" and report.profile == "local"
    assert report.facts.versions == {"python": "3.11.2", "pillow": "11.3.0"}  # the manifest's
    assert report.facts.source.startswith("name/images-verify-local-sglang/")
    assert report.facts.base_digest == str(record.base.digest)
    assert report.facts.fix_layers[0].startswith("RUN python3 -m pip install")
    kinds = {c.kind for c in report.checks if c.name == "torch_arch"}
    assert kinds == {"probe", "images-verify"}
    for torch_arch in [c for c in report.checks if c.name == "torch_arch"]:
        assert torch_arch.status is Status.FAIL and "CPU torch build" in torch_arch.accepted
    decision = check_promotable(store, record.digest)
    assert decision.allowed, decision.reasons                # accepted by profile local


def test_unaccepted_failure_still_refused(store) -> None:
    record = _build_and_probe(store, "vllm", torch_arch=Status.FAIL)   # local accepts DEFERRED
    decision = check_promotable(store, record.digest)
    assert not decision.allowed
    assert any("probe:torch_arch FAIL" in reason for reason in decision.reasons)


def test_name_resolves_through_latest_build(store) -> None:
    record = _build_and_probe(store, probe_key="digest")
    assert latest_build("sglang", store=store) == record
    resolved = resolve("sglang", store)
    assert (resolved.digest, resolved.name, resolved.how) == (record.digest, "sglang", "name")
    report = build_report(store, resolved.digest, name="sglang")
    assert report.status is Status.FAIL and report.gate.allowed  # accepted FAIL: gate warns


def test_versions_from_the_probe_when_no_manifest_yet(store) -> None:
    record = _build_and_probe(store, manifest=False)
    report = build_report(store, record.digest, required=["probe:pip_check"])
    assert report.facts.versions == {"python": "3.11.2", "torch": "2.13.0+cpu",
                                     "pillow": "11.3.0", "nixl-cu12": "1.2.0"}
    assert report.facts.base_digest == str(record.base.digest)     # from the build's base
    assert report.facts.name == "sglang" and report.facts.fix_layers == []
    text = render(report, "md")     # no fix layer: no empty heading either
    assert "## Fix layers" not in text and "No evidence" not in text


def test_the_push_to_staging_is_an_endpoint_not_verified(store) -> None:
    record = _build_and_probe(store)
    [staging] = build_report(store, record.digest).endpoints
    assert staging.reference == str(record.reference) and staging.digest == str(record.digest)
    assert staging.verified is None          # pushed, not read back: unknown, never "yes"


def test_reports_for_every_spec_image(store, tmp_path) -> None:
    from imagekit.report.batch import reports_for_spec

    record = _build_and_probe(store, "sglang")
    results = {r.image: r for r in reports_for_spec(store, tmp_path / "out", profile="local")}
    assert set(results) == {"sglang", "vllm"}
    assert results["sglang"].digest == str(record.digest)
    assert results["sglang"].status is Status.FAIL and len(results["sglang"].files) == 5
    assert all(Path(f).is_file() for f in results["sglang"].files)
    assert results["vllm"].missing and "no build of 'vllm'" in results["vllm"].missing
    index = (tmp_path / "out" / "index.md").read_text()
    # an accepted check counts once per phase it ran in (probe and images-verify), as every
    # other count of the report does
    decision = results["sglang"].decision
    assert decision is not None and decision.startswith(
        "promotable: 3 checks pass, 2 accepted FAIL (torch_arch: the stand-in carries the "
        "machine's CPU"), decision
    # the decision leads the index (its first line) and its row; the row's checks agree with
    # it (the FAIL is the accepted one), never a bare raw "FAIL" beside "promotable"
    assert index.splitlines()[0].startswith(f"**sglang: {decision}; vllm: no report")
    assert f"| sglang | **{decision}** | 3 PASS, 2 accepted (torch_arch FAIL) | " \
        f"`{record.digest}` |" in index
    assert "| vllm | **missing** |" in index
    html = reports_for_spec(store, tmp_path / "html", fmt="html", profile="local")
    assert [Path(f).suffix for r in html for f in r.files] == [".html"]


def test_the_rehearsal_index_leads_with_each_promoted_images_decision(store, tmp_path) -> None:
    """The three-actor rehearsal's index.md (imagekit/rehearsal/flow.py): per promoted image
    the decision first, the evaluated checks beside it, read from the auditor's reports."""
    from imagekit.rehearsal import decision_rows
    from imagekit.report.batch import reports_for_spec

    record = _build_and_probe(store, "sglang")
    out = tmp_path / "out"
    [sglang] = [r for r in reports_for_spec(store, out, profile="local") if r.image == "sglang"]
    rows, decisions = decision_rows(
        out, {"sglang": f"127.0.0.1:5003/imagekit/sglang@{record.digest}",
              "vllm": "127.0.0.1:5003/imagekit/vllm:local-000000000000"})
    assert rows[0].startswith("| image | decision | checks |")
    assert decisions == [f"sglang: {sglang.decision}", "vllm: no report"]
    assert any(row.startswith("| sglang ") and
               f"**{sglang.decision}** | 3 PASS, 2 accepted (torch_arch FAIL) |" in row
               for row in rows), rows
    assert any(row.startswith("| vllm ") and "no report" in row for row in rows), rows
    # the index's first line says what the user may do with each promoted image, and why
    from imagekit.rehearsal.flow import write_index

    write_index(out, out / "actors", {"sglang": f"127.0.0.1:5003/imagekit/sglang@{record.digest}"},
                store.root)
    first = (out / "index.md").read_text().splitlines()[0]
    assert first == f"**sglang: {sglang.decision}**", first
