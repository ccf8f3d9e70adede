"""The difference against the previous build of the same image: base
digest, package versions the probes saw, checks whose status changed — in the report's model
and in its markdown and HTML. Evidence written through the real EvidenceStore."""

from __future__ import annotations

from imagekit.evidence import EvidenceStore, Role, Subject, kinds
from imagekit.report import build_report, render
from imagekit.results import CheckResult, Status
from tests.report.conftest import P, fake_digest, write_rehearsal


def _rebuild(store: EvidenceStore, label: str, *, name: str = "sglang",
             profile: str | None = None, torch_arch: Status = Status.FAIL) -> str:
    """A later build of image `name`: another digest and base, some versions moved, and
    torch_arch's status changed; not promoted."""
    digest, image_id = fake_digest(f"{label}-manifest"), fake_digest(f"{label}-config")
    base = fake_digest(f"{label}-base")
    with store.attempt(f"{name}-fixed", "build", subjects=[
            Subject.of(digest, Role.SUBJECT), Subject.of(image_id, Role.ALIAS),
            Subject.of(base, Role.BASE)]) as a:
        a.write_result(kinds.BuildResult(name=name, profile=profile, base_digest=base,
                                         image_id=image_id, digest=digest))
        a.add_check(P("build"))
        a.add_check(P("push"))
    with store.attempt(image_id, "probe") as a:
        a.write_result(kinds.ProbeResult(image=name, probes=["pip_check", "torch_arch"]))
        a.add_check(P("pip_check"))
        a.add_check(CheckResult(name="torch_arch", status=torch_arch, detail="get_arch_list()"))
    with store.attempt(digest, "images-verify", subjects=[
            Subject.of(digest), Subject.of(image_id, Role.ALIAS),
            Subject.of(base, Role.BASE)]) as a:
        a.write_result(kinds.ImagesVerifyResult(
            image=name, profile=profile, digest=digest, image_id=image_id, base_digest=base,
            versions={"python": "3.11.2", "torch": "2.13.1", "nixl": "1.2.0",
                      "nixl-cu12": "1.2.0", "nixl-cu13": "1.2.0", "av": "16.1.0",
                      "engine": "sglang 0.5.7", "flashinfer": "0.4.0"},
            verdict=Status.PASS))
        a.add_check(P("manifest"))
    return digest


def test_the_previous_build_shows_base_versions_and_changed_checks(store) -> None:
    old = write_rehearsal(store, "sglang")
    new = _rebuild(store, "sglang-2")
    report = build_report(store, new)
    p = report.previous
    assert p is not None and p.digest == old.digest
    assert (p.base_before, p.base_after) == (old.base, fake_digest("sglang-2-base"))
    assert p.base_changed
    assert {(v.package, v.before, v.after) for v in p.versions} == {
        ("torch", "2.13.0", "2.13.1"), ("pillow", "11.3.0", None),
        ("engine", "sglang 0.5.6", "sglang 0.5.7"), ("flashinfer", None, "0.4.0")}
    changed = {c.check: (c.before, c.after) for c in p.checks}
    assert changed["probe:torch_arch"] == (Status.PASS, Status.FAIL)
    assert changed["promote:hop-1"] == (Status.PASS, None)      # the new one is not promoted
    assert "probe:pip_check" not in changed and "images-verify:manifest" not in changed
    torch = next(c for c in p.checks if c.check == "probe:torch_arch")
    assert torch.evidence and "probe" in torch.evidence

    md = render(report, "md")
    assert "## Since the previous build" in md and f"`{old.digest}`" in md
    assert "`torch` 2.13.0 → 2.13.1" in md and "`pillow` 11.3.0 → absent" in md
    assert "| probe:torch_arch | PASS | **FAIL** |" in md
    assert "- not run on this build (yet): " in md and "`promote:hop-1`" in md
    assert "| promote:hop-1 |" not in md                        # not a status change
    html = render(report, "html")
    assert '<h2 id="previous">Since the previous build</h2>' in html
    assert "check whose status changed" in html and "probe:torch_arch" in html


def test_no_previous_build_for_the_first_build_or_another_image(store) -> None:
    first = write_rehearsal(store, "sglang")
    assert build_report(store, first.digest).previous is None          # nothing earlier
    other = _rebuild(store, "vllm-1", name="vllm")
    assert build_report(store, other).previous is None                 # another image
    md = render(build_report(store, first.digest), "md")
    assert "No earlier build of this image in evidence." in md


def test_a_later_build_or_another_profile_is_not_the_previous(store) -> None:
    old = write_rehearsal(store, "sglang", profile="local")
    _rebuild(store, "sglang-prod", profile="production")   # another profile: not previous
    new = _rebuild(store, "sglang-3", profile="local")
    assert build_report(store, new).previous.digest == old.digest
    # the old build's own report: the later builds are not its previous
    assert build_report(store, old.digest).previous is None


def test_unchanged_statuses_and_versions_say_so(store) -> None:
    write_rehearsal(store, "sglang", promote=False, preflight=False)
    new = _rebuild(store, "sglang-4", torch_arch=Status.PASS)
    p = build_report(store, new).previous
    assert "probe:torch_arch" not in {c.check for c in p.checks}


def test_a_build_not_probed_yet_is_not_all_versions_removed(store) -> None:
    """A new build that was only built (no probe, no images-verify yet): its versions are
    unknown, not 'absent'; its checks are 'not run yet', not a wall of status changes."""
    old = write_rehearsal(store, "sglang")
    digest, base = fake_digest("sglang-5-manifest"), fake_digest("sglang-5-base")
    with store.attempt("sglang-fixed", "build", subjects=[
            Subject.of(digest, Role.SUBJECT), Subject.of(base, Role.BASE)]) as a:
        a.write_result(kinds.BuildResult(name="sglang", base_digest=base, digest=digest))
        a.add_check(P("build"))
    report = build_report(store, digest)
    p = report.previous
    assert p.digest == old.digest and not p.probed and p.versions == []
    assert p.changed == [] and "probe:torch_arch" in {c.check for c in p.not_run}
    md = render(report, "md")
    assert "not known for both builds" in md and "→ absent" not in md
