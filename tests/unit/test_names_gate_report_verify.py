"""Names everywhere: `gate NAME`, `report NAME` and `verify-mirror NAME …`
resolve a spec image NAME through the one resolver (`imagekit.names`): the verified build of
THIS spec and lock — the digest `promote NAME` would promote — not the newest build of that
name, and never `docker.io/library/NAME`."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.build import BuildRecord
from imagekit.build.builder import KIND, evidence_name
from imagekit.cli import app
from imagekit.evidence import EvidenceStore, Role
from imagekit.oci import Digest, ImageReference
from imagekit.results import CheckResult, Status

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/
#: nothing listens here (this helper's scratch range): verify-mirror must fail reaching THIS
UNREACHABLE = "127.0.0.1:5219"


def _build(store: EvidenceStore, key: str, fill: str) -> BuildRecord:
    digest = Digest("sha256", fill * 64)
    record = BuildRecord(
        name="sglang", profile="local", engine="sglang", base="127.0.0.1:5001/base:1",
        cache_key=key, local_tag=f"imagekit-local/sglang:{fill}",
        image_id=Digest("sha256", fill * 63 + "0"),
        reference=ImageReference.parse(f"{UNREACHABLE}/imagekit/sglang@{digest}"),
        digest=digest, seconds=1.0, built=dt.datetime.now(dt.UTC))
    with store.attempt(evidence_name("sglang"), KIND, profile="local", cache_key=key) as a:
        a.write_json("build.json", record)
        a.add_subject(digest, Role.SUBJECT, str(record.reference))
        a.add_check(CheckResult(name="build", status=Status.PASS))
    return record


@pytest.fixture
def builds(tmp_path, monkeypatch):
    """The spec's own build (a), then a newer build of the same name from another spec (b).
    A fresh checkout's lock has no base digests yet, so the spec's build key is fixed here
    (what `build_key(resolve_image(spec, NAME, profile))` gives once it has)."""
    import imagekit.build
    import imagekit.spec

    monkeypatch.setattr(imagekit.spec, "resolve_image", lambda spec, name, profile: name)
    monkeypatch.setattr(imagekit.build, "build_key", lambda image: "a" * 64)
    store = EvidenceStore(tmp_path / "ev")
    ours = _build(store, "a" * 64, "a")
    other = _build(store, "f" * 64, "b")  # newer, another spec's
    return store, ours, other


def run(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_gate_name_judges_the_build_of_this_spec(builds) -> None:
    store, ours, other = builds
    done = run("gate", "sglang", "--json", "--evidence-dir", str(store.root))
    assert done.exit_code == 1  # no check evidence: refused — but about OUR build
    decision = json.loads(done.stdout)
    assert decision["digest"] == str(ours.digest) != str(other.digest)


def test_report_name_reports_the_build_of_this_spec(builds) -> None:
    store, ours, other = builds
    done = run("report", "sglang", "--format", "json", "--evidence-dir", str(store.root))
    assert done.exit_code == 0, done.output
    assert str(ours.digest) in done.stdout and str(other.digest) not in done.stdout


def test_verify_copy_takes_names(builds) -> None:
    store, ours, _ = builds
    done = run("verify-mirror", "sglang", "sglang", "--json", "--call-timeout", "2",
               "--evidence-dir", str(store.root))
    assert done.exit_code == 2
    # the NAME became the staging build pinned by digest, not docker.io/library/sglang
    assert UNREACHABLE in done.output and "docker.io" not in done.output
    (failed,) = store.attempts(str(ours.digest), "verify-copy")  # filed under OUR build
    assert failed.status is Status.ERROR


def test_unknown_name_is_bad_input_for_every_command(builds) -> None:
    store, _, _ = builds
    for args in (["gate", "nosuch"], ["report", "nosuch"], ["verify-mirror", "nosuch", "sglang"]):
        done = run(*args, "--evidence-dir", str(store.root))
        assert done.exit_code == 2 and "not an image of the spec" in done.output, args


def test_a_name_without_a_local_build_resolves_from_the_registry_when_trusted(
        builds, tmp_path) -> None:
    """On a machine whose store has no build, a NAME is the tag the profile's build
    pushes to staging (`<staging>/<repository>:<build key[:16]>`), resolved and verified by
    the resolver the CLI hands in; without one it stays bad input naming what to do."""
    from imagekit.errors import InvalidInput
    from imagekit.names import resolve_target

    empty = EvidenceStore(tmp_path / "empty")
    asked = []
    served = Digest("sha256", "c" * 64)

    def remote(tag):
        asked.append(str(tag))
        return served, f"{tag} -> {served}, verified by the test-result signed by ci"

    target = resolve_target("sglang", spec_path=ASSETS / "dockerfiles" / "images.toml",
                            store=empty, remote=remote)
    assert asked == ["127.0.0.1:5001/imagekit/sglang:" + "a" * 16]
    assert target.digest == served and target.reference.digest == served
    assert "signed by ci" in target.note
    with pytest.raises(InvalidInput, match="no verified"):
        resolve_target("sglang", spec_path=ASSETS / "dockerfiles" / "images.toml", store=empty)

    def unverified(tag):
        raise InvalidInput(f"{tag} serves {served}, but no test-result statement signed by a "
                           "trusted key is about it")

    with pytest.raises(InvalidInput, match="no test-result statement signed by a trusted"):
        resolve_target("sglang", spec_path=ASSETS / "dockerfiles" / "images.toml", store=empty,
                       remote=unverified)
