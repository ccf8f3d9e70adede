"""`imagekit report`, `imagekit gate`, `imagekit schemas` through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import junitparser
import pytest

from tests.report.conftest import P, fake_digest, push_tiny_image, write_rehearsal

REPO = Path(__file__).resolve().parents[2]


def ik(*args: str, evidence: Path | None = None) -> subprocess.CompletedProcess:
    env = None
    if evidence is not None:
        import os
        env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(evidence)}
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=120)


def test_report_formats_to_stdout_and_file(rehearsal, tmp_path) -> None:
    root = rehearsal.store.root
    done = ik("report", rehearsal.digest, "--format", "json", "--record", evidence=root)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["subject"] == rehearsal.digest
    [archived] = rehearsal.store.attempts(rehearsal.digest, "report")
    assert "report.intoto.json" in {f.path for f in archived.files}
    out = tmp_path / "junit.xml"
    done = ik("report", rehearsal.digest, "--format", "junit", "--out", str(out),
              "--require-check", "probe:pip_check", evidence=root)
    assert done.returncode == 0 and done.stdout == ""
    assert {s.name for s in junitparser.JUnitXml.fromfile(str(out))} >= {"probe", "required"}
    pinned = f"127.0.0.1:5002/sglang-fixed@{rehearsal.digest}"
    done = ik("report", pinned, "--format", "intoto", evidence=root)
    assert json.loads(done.stdout)["_type"] == "https://in-toto.io/Statement/v1"


def test_an_unreachable_registry_resolves_offline_and_says_from_where(rehearsal) -> None:
    """Tags resolve at the registry; only when it cannot be reached does the evidence suggest,
    and the output says so and names the attempt."""
    from imagekit.evidence import kinds

    unreachable = "127.0.0.1:5189/imagekit/sglang:offline"       # nothing listens there
    with rehearsal.store.attempt(rehearsal.digest, "promote") as a:
        a.write_result(kinds.PromoteEvidence(
            source="127.0.0.1:5001/imagekit/sglang:x", digest=rehearsal.digest,
            hops=[kinds.HopEvidence(endpoint=unreachable, registry="127.0.0.1:5189",
                                    digest=rehearsal.digest, verified=True)]))
        a.add_check(P("hop-1"))
    done = ik("report", unreachable, "--format", "json", evidence=rehearsal.store.root)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["subject"] == rehearsal.digest
    assert "resolved OFFLINE" in done.stderr and "127.0.0.1:5189 unreachable" in done.stderr
    where = str(a.path.relative_to(rehearsal.store.root))
    assert f"from evidence {where}" in done.stderr and where in report["resolution"]


def test_bad_input_is_one_line_exit_2(rehearsal) -> None:
    import os

    env = {**os.environ, "IMAGEKIT_EVIDENCE_DIR": str(rehearsal.store.root)}
    cases = (["report", rehearsal.digest, "--format", "pdf"],
             ["report", "sha256:1234"],
             ["report", fake_digest("unknown")],
             ["report", rehearsal.digest, "--require-check", "probe:"],
             ["report", "Not A Ref"],
             ["report", "127.0.0.1:1/nothing/here:tag"],       # unreachable registry
             ["report", "--all-images"],                         # needs --out-dir DIR
             ["report", rehearsal.digest, "--all-images", "--out", "/tmp/x"],
             ["report"])
    running = [(args, subprocess.Popen([sys.executable, "-m", "imagekit", *args], cwd=REPO,
                                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       text=True)) for args in cases]     # in parallel
    for args, process in running:
        stdout, stderr = process.communicate(timeout=120)
        assert process.returncode == 2, (args, stderr)
        assert stderr.startswith("imagekit: error: ") and stderr.count("\n") == 1, (args, stderr)
        assert stdout == ""


def test_report_by_name_uses_latest_build(rehearsal) -> None:
    import pytest

    from imagekit.errors import NotFound
    from imagekit.report.resolve import resolve

    resolved = resolve("sglang", rehearsal.store)       # the BuildResult named sglang
    assert (str(resolved.digest), resolved.name, resolved.how) == \
        (rehearsal.digest, "sglang", "name")
    with pytest.raises(NotFound, match="no build of 'vllm'"):
        resolve("vllm", rehearsal.store)


def test_gate_command_exit_codes(store) -> None:
    good = write_rehearsal(store, "vllm")
    bad = write_rehearsal(store, "sglang", media_fail=True)
    allowed = ik("gate", good.digest, "--json", evidence=store.root)
    assert allowed.returncode == 0 and json.loads(allowed.stdout)["allowed"] is True
    refused = ik("gate", bad.digest, evidence=store.root)
    assert refused.returncode == 1
    assert "REFUSED" in refused.stdout and "corrupted-media-status" in refused.stdout


def test_schemas_check_command(tmp_path) -> None:
    assert ik("schemas", "check").returncode == 0
    assert ik("schemas", "export", str(tmp_path)).returncode == 0
    (tmp_path / "Platform.json").write_text("{}\n")
    done = ik("schemas", "check", str(tmp_path))
    assert done.returncode == 1 and "Platform.json: differs" in done.stderr


@pytest.mark.registry
def test_report_of_a_moved_tag_reports_the_new_digest(infra, store) -> None:
    """Evidence says the tag named the old image; the registry now serves a new one there:
    `report REF:tag` and `gate REF:tag` speak about the new digest (tags move)."""
    from imagekit.evidence import kinds
    from imagekit.report.resolve import resolve

    staging = infra.registries["staging"].address
    text = f"{staging}/imagekit-report-test:moved"
    old = push_tiny_image(staging, "imagekit-report-test", "moved")
    for digest in (old,):
        with store.attempt(digest, "promote") as a:        # the evidence names tag -> old
            a.write_result(kinds.PromoteEvidence(source=text, digest=str(digest), hops=[
                kinds.HopEvidence(endpoint=text, registry=staging, digest=str(digest),
                                  verified=True)]))
            a.add_check(P("hop-1"))
    new = push_tiny_image(staging, "imagekit-report-test", "moved")     # the tag moves
    assert new != old
    with store.attempt(new, "probe") as a:
        a.write_result(kinds.ProbeResult(image=text))
        a.add_check(P("pip_check"))
    resolved = resolve(text, store)
    assert (resolved.digest, resolved.how) == (new, "registry")
    done = ik("report", text, "--format", "json", evidence=store.root)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["subject"] == str(new)
    assert f"{text} → {new} at the registry now" in done.stderr
    gate = ik("gate", text, "--json", "--require-check", "probe", evidence=store.root)
    assert json.loads(gate.stdout)["digest"] == str(new) and gate.returncode == 0, gate.stderr


def test_a_base_reference_does_not_resolve_to_the_image_built_on_it(store) -> None:
    from imagekit.evidence import kinds
    from imagekit.report.resolve import _from_evidence
    from imagekit.results import CheckResult

    base = "127.0.0.1:5001/standins/sglang-base:cu13"
    pushed = f"127.0.0.1:5001/imagekit/sglang:0123@{fake_digest('sglang-manifest')}"
    with store.attempt("image-sglang", "build") as a:
        a.write_result(kinds.BuildResult(name="sglang", base=base, reference=pushed,
                                         digest=fake_digest("sglang-manifest")))
        a.add_check(CheckResult(name="build", status="PASS"))
    assert _from_evidence(store, {base}) is None
    digest, where = _from_evidence(store, {"127.0.0.1:5001/imagekit/sglang:0123"})
    assert str(digest) == fake_digest("sglang-manifest") and where.startswith("name/")


def test_report_all_formats_into_a_directory(rehearsal, tmp_path) -> None:
    root = rehearsal.store.root
    assert ik("report", rehearsal.digest, "--format", "all", evidence=root).returncode == 2
    done = ik("report", rehearsal.digest, "--format", "all", "--out-dir", str(tmp_path / "r"),
              evidence=root)
    assert done.returncode == 0, done.stderr
    stem = "sglang-" + rehearsal.digest.removeprefix("sha256:")[:12]
    names = sorted(p.name for p in (tmp_path / "r").iterdir())
    assert names == sorted(f"{stem}{s}" for s in (".md", ".json", ".junit.xml", ".intoto.json",
                                                  ".html"))
    junitparser.JUnitXml.fromfile(str(tmp_path / "r" / f"{stem}.junit.xml"))
    assert json.loads((tmp_path / "r" / f"{stem}.intoto.json").read_text())["subject"]


def test_unreadable_evidence_is_a_one_line_error(rehearsal) -> None:
    broken = rehearsal.store.root / "sha256" / rehearsal.digest.removeprefix("sha256:") / \
        "probe" / "20990101T000000.000000Z-ffffff"
    broken.mkdir(parents=True)
    (broken / "attempt.json").write_text("{not json")
    for args in (["report", rehearsal.digest], ["gate", rehearsal.digest]):
        done = ik(*args, evidence=rehearsal.store.root)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("imagekit: error: unreadable evidence")
        assert done.stderr.count("\n") == 1
