"""SLSA v1 provenance: BuildKit's real statement (tests/attest/data/provenance, a layout a
BuildKit 0.25 build wrote, its image layers left out) read from the layout, signed for the
pushed digest, and checked against a lock and a checkout — by the check itself, through the
gate's report and through a signature round trip. No registry here."""

from __future__ import annotations

import base64
import copy
import json
import shutil
from pathlib import Path

import pytest

from imagekit.attest import keys
from imagekit.attest.dsse import bundle_of, envelope_of_bundle, sign_envelope, verify_envelope
from imagekit.errors import DigestMismatch, NotFound
from imagekit.evidence import EvidenceStore, Role, Subject, kinds
from imagekit.oci.digest import Digest
from imagekit.provenance import (
    SLSA_PROVENANCE_TYPE,
    check_provenance,
    judge_provenance,
    read_buildkit_provenance,
    signed_statement,
)
from imagekit.report.collect import build_report
from imagekit.results import CheckResult, Status

DATA = Path(__file__).parent / "data" / "provenance"
#: the image manifest the sample layout's attestation manifest is about
IMAGE = Digest.parse("sha256:287665025ac56c4edfb5368f4700137c669c874efa6a662a1f86f764fcd00de8")
#: the base BuildKit resolved (pkg:docker/127.0.0.1:5001/imagekit-standins/vllm-base@standin)
BASE = Digest.parse("sha256:ab248a3fac659f236b602f98f6dd82bf1f987ba3a0951997bece8396594b1f11")
BASE_TAG = "127.0.0.1:5001/imagekit-standins/vllm-base:standin"
PUSHED = "127.0.0.1:5001/imagekit/vllm"


def buildkit_bytes() -> bytes:
    return read_buildkit_provenance(DATA, IMAGE)


def write_spec(root: Path, base_digest: Digest = BASE, dockerfile: bytes | None = None,
               repository: str = "imagekit/vllm") -> Path:
    """A spec of one image (vllm, profile local) whose lock pins `base_digest`, with the
    Dockerfile BuildKit built (or `dockerfile`) in the checkout."""
    (root / "vllm").mkdir(parents=True, exist_ok=True)
    (root / "vllm" / "Dockerfile").write_bytes(
        dockerfile if dockerfile is not None else (DATA / "vllm.Dockerfile").read_bytes())
    (root / "images.toml").write_text(f"""version = 1
default_profile = "local"

[images.vllm]
engine = "vllm"
dockerfile = "vllm/Dockerfile"
repository = "{repository}"
probes = ["pip_check"]
promotion = ["staging", "production"]

[images.vllm.base]
local = "{BASE_TAG}"

[profiles.local]
lock = "images.local.lock"
staging = "127.0.0.1:5001"
production = "127.0.0.1:5002"
target = "127.0.0.1:5003"
""")
    (root / "images.local.lock").write_text(f"""version = 1
profile = "local"

[bases.vllm]
tag = "{BASE_TAG}"
digest = "{base_digest}"
""")
    return root / "images.toml"


def by_name(checks: list[CheckResult]) -> dict[str, CheckResult]:
    return {c.name: c for c in checks}


def judged(statement: dict, spec: Path, digest: Digest = IMAGE) -> dict[str, CheckResult]:
    return by_name(judge_provenance(statement, digest, image="vllm", profile="local",
                                    spec_path=spec))


# -- the layout -------------------------------------------------------------------------------

def test_layout_gives_buildkit_statement_bytes_unchanged():
    data = buildkit_bytes()
    assert Digest.of_bytes(data) == Digest.parse(
        "sha256:e990b22cbb3bc029b6542c0ba8cdc1a1d870fc20dc051fc685814842a96e5587")
    statement = json.loads(data)
    assert statement["predicateType"] == SLSA_PROVENANCE_TYPE and statement["subject"] == []


def test_layout_refuses_another_manifest_and_a_changed_blob(tmp_path):
    with pytest.raises(NotFound, match="no attestation manifest about"):
        read_buildkit_provenance(DATA, BASE)
    layout = tmp_path / "layout"
    shutil.copytree(DATA, layout)
    blob = layout / "blobs" / "sha256" / \
        "e990b22cbb3bc029b6542c0ba8cdc1a1d870fc20dc051fc685814842a96e5587"
    blob.chmod(0o644)
    blob.write_bytes(blob.read_bytes().replace(BASE.hex.encode(), b"0" * 64))
    with pytest.raises(DigestMismatch, match="does not hash to"):
        read_buildkit_provenance(layout, IMAGE)


# -- the check --------------------------------------------------------------------------------

def test_real_statement_passes_against_the_lock_that_pins_its_base(tmp_path):
    checks = judged(signed_statement(buildkit_bytes(), IMAGE, PUSHED), write_spec(tmp_path))
    assert {name: c.status for name, c in checks.items()} == {
        "subject": Status.PASS, "base": Status.PASS, "dockerfile": Status.PASS}
    assert str(BASE) in checks["base"].detail


def test_a_lock_pinning_another_base_fails_naming_both_digests(tmp_path):
    other = Digest.of_bytes(b"another base")
    checks = judged(signed_statement(buildkit_bytes(), IMAGE, PUSHED),
                    write_spec(tmp_path, base_digest=other))
    assert checks["base"].status is Status.FAIL
    assert str(BASE) in checks["base"].detail and str(other) in checks["base"].detail
    assert "\n" not in checks["base"].detail


def test_a_provenance_from_another_repository_fails(tmp_path):
    statement = signed_statement(buildkit_bytes(), IMAGE, PUSHED)
    moved = copy.deepcopy(statement)
    dependency = moved["predicate"]["buildDefinition"]["resolvedDependencies"][0]
    dependency["uri"] = dependency["uri"].replace("imagekit-standins/vllm-base",
                                                  "elsewhere/vllm-base")
    checks = judged(moved, write_spec(tmp_path))
    assert checks["base"].status is Status.FAIL
    assert "127.0.0.1:5001/elsewhere/vllm-base@" + str(BASE) in checks["base"].detail


def test_a_changed_dockerfile_fails_naming_it(tmp_path):
    changed = (DATA / "vllm.Dockerfile").read_bytes() + b"RUN true\n"
    spec = write_spec(tmp_path, dockerfile=changed)
    checks = judged(signed_statement(buildkit_bytes(), IMAGE, PUSHED), spec)
    assert checks["dockerfile"].status is Status.FAIL
    assert str(tmp_path / "vllm" / "Dockerfile") in checks["dockerfile"].detail
    assert checks["base"].status is Status.PASS


def test_without_source_infos_the_dockerfile_is_deferred_with_why(tmp_path):
    statement = signed_statement(buildkit_bytes(), IMAGE, PUSHED)
    del statement["predicate"]["runDetails"]["metadata"]["buildkit_metadata"]["source"]
    checks = judged(statement, write_spec(tmp_path))
    assert checks["dockerfile"].status is Status.DEFERRED
    assert "mode=min" in checks["dockerfile"].detail
    assert checks["base"].status is Status.PASS


def test_an_image_the_spec_cannot_resolve_is_deferred_never_pass(tmp_path):
    spec = write_spec(tmp_path)
    (tmp_path / "images.local.lock").unlink()
    checks = judged(signed_statement(buildkit_bytes(), IMAGE, PUSHED), spec)
    assert checks["base"].status is Status.DEFERRED and "no digest in the lock" in \
        checks["base"].detail
    assert checks["dockerfile"].status is Status.DEFERRED


def test_a_statement_about_another_digest_fails_its_subject(tmp_path):
    statement = signed_statement(buildkit_bytes(), IMAGE, PUSHED)
    other = Digest.of_bytes(b"another image")
    checks = judged(statement, write_spec(tmp_path), digest=other)
    assert checks["subject"].status is Status.FAIL
    assert str(IMAGE) in checks["subject"].detail and str(other) in checks["subject"].detail
    # BuildKit's own statement names no subject at all
    raw = by_name(check_provenance(buildkit_bytes(), IMAGE, "unresolved"))
    assert raw["subject"].status is Status.FAIL


def test_signed_statement_keeps_buildkit_predicate_and_sets_subject():
    original = json.loads(buildkit_bytes())
    statement = signed_statement(buildkit_bytes(), IMAGE, PUSHED)
    assert statement["predicate"] == original["predicate"]
    assert statement["subject"] == [{"name": PUSHED, "digest": {"sha256": IMAGE.hex}}]
    assert statement["_type"] == "https://in-toto.io/Statement/v1"


# -- signing ----------------------------------------------------------------------------------

def test_signature_round_trip_and_a_moved_statement_does_not_verify(tmp_path):
    private, public = keys.generate(tmp_path / "k")
    key = keys.load_private(private)
    statement = signed_statement(buildkit_bytes(), IMAGE, PUSHED)
    envelope = envelope_of_bundle(bundle_of(sign_envelope(statement, key), key))
    verified = verify_envelope(envelope, keys.load_public(public))
    spec = write_spec(tmp_path / "spec")
    assert {c.status for c in judged(verified, spec).values()} == {Status.PASS}
    # the same signed statement served as another image's: its subject is not that digest
    other = Digest.of_bytes(b"another image")
    assert judged(verified, spec, digest=other)["subject"].status is Status.FAIL
    # and re-pointed at the other digest, its signature no longer verifies
    moved = copy.deepcopy(verified)
    moved["subject"][0]["digest"] = {"sha256": other.hex}
    forged = dict(envelope, payload=base64.b64encode(
        json.dumps(moved, sort_keys=True, separators=(",", ":")).encode()).decode())
    with pytest.raises(Exception, match="no signature verifies"):
        verify_envelope(forged, keys.load_public(public))


# -- the gate ---------------------------------------------------------------------------------

def record_build(store: EvidenceStore, provenance: bytes | None, digest: Digest = IMAGE,
                 pushed: str = PUSHED) -> None:
    """A build of vllm (profile local) that pushed `digest` to `pushed`, recording BuildKit's
    `provenance` beside it, as the builder records it."""
    image_id = Digest.of_bytes(b"config")
    reference = f"{pushed}:k1@{digest}"
    with store.attempt("image-vllm", "build", subjects=[
            Subject.of(digest, Role.SUBJECT, reference), Subject.of(image_id, Role.ALIAS),
            Subject.of(BASE, Role.BASE)], profile="local") as attempt:
        if provenance is not None:
            attempt.write_bytes("provenance.json", provenance)
        attempt.write_result(kinds.BuildResult(
            name="vllm", profile="local", base=f"{BASE_TAG}@{BASE}", base_digest=str(BASE),
            image_id=str(image_id), digest=str(digest), reference=reference))
        attempt.add_check(CheckResult(name="build", status=Status.PASS, detail=reference))


def gate_lines(tmp_path: Path, base_digest: Digest, provenance: bytes | None = None):
    store = EvidenceStore(tmp_path / "evidence")
    record_build(store, buildkit_bytes() if provenance is None else provenance)
    report = build_report(store, IMAGE, required=["build"],
                          spec_path=write_spec(tmp_path / "spec", base_digest=base_digest),
                          with_previous=False)
    return report, {line.name: line for line in report.checks if line.kind == "provenance"}


def test_gate_passes_a_build_whose_provenance_matches_the_lock(tmp_path):
    report, lines = gate_lines(tmp_path, BASE)
    assert {name: line.status for name, line in lines.items()} == {
        "subject": Status.PASS, "base": Status.PASS, "dockerfile": Status.PASS}
    assert report.gate.allowed, report.gate.reasons


def test_gate_refuses_a_build_from_another_base(tmp_path):
    other = Digest.of_bytes(b"re-pinned base")
    report, lines = gate_lines(tmp_path, other)
    assert lines["base"].status is Status.FAIL
    assert not report.gate.allowed
    refusal = next(r for r in report.gate.reasons if r.startswith("provenance:base FAIL"))
    assert str(BASE) in refusal and str(other) in refusal


def test_gate_without_recorded_provenance_has_no_provenance_line(tmp_path):
    store = EvidenceStore(tmp_path / "evidence")
    record_build(store, None)
    report = build_report(store, IMAGE, required=["build", "provenance"],
                          spec_path=write_spec(tmp_path / "spec"), with_previous=False)
    assert not [line for line in report.checks if line.kind == "provenance"]
    # required, its absence refuses
    assert any("required check provenance is missing" in r for r in report.gate.reasons)
