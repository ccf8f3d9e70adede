"""The trust policy and the gate's decisions from signed statements alone:
real ECDSA keys and DSSE signing (imagekit.attest), synthetic statements, no registry."""

from __future__ import annotations

import datetime as dt
import os

import pytest

from imagekit.attest import keys
from imagekit.attest.dsse import bundle_of, sign_envelope
from imagekit.attest.pull import file_attested
from imagekit.attest.verify import (
    EnvelopeError,
    Untrusted,
    check_promotion,
    check_test_result,
    link_shown_by_tests,
    newest,
    verify_trusted,
)
from imagekit.errors import CheckFailed, InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.oci.digest import Digest
from imagekit.report.gate import check_promotable, enforce, image_phase_gate
from imagekit.results import CheckResult, Status
from imagekit.trust import load_trust, signed_time
from imagekit.trust.policy import short_type

DIGEST = Digest.parse("sha256:" + "ab" * 32)
OTHER = Digest.parse("sha256:" + "cd" * 32)
TR = "https://in-toto.io/attestation/test-result/v0.1"
PROMO = "https://imagekit.dev/attestation/promotion/v0.1"


@pytest.fixture(scope="module")
def ci(tmp_path_factory):
    return keys.generate(tmp_path_factory.mktemp("ci"))


@pytest.fixture(scope="module")
def scanner(tmp_path_factory):
    return keys.generate(tmp_path_factory.mktemp("scanner"))


def _public_named(pair, directory, name):
    path = directory / f"{name}.pub"
    path.write_bytes(pair[1].read_bytes())
    return path


def _time(minutes: int) -> str:
    base = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    return (base + dt.timedelta(minutes=minutes)).isoformat()


def tr_statement(result="PASSED", passed=("probe:pip_check", "images-verify:verdict"),
                failed=(), acceptances=(), minutes=0, digest=DIGEST) -> dict:
    return {"_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "127.0.0.1:5001/imagekit/x",
                         "digest": {"sha256": digest.hex}}],
            "predicateType": TR,
            "predicate": {"result": result, "configuration": [], "passedTests": list(passed),
                          "warnedTests": [], "failedTests": list(failed),
                          "timestamp": _time(minutes), "acceptances": list(acceptances)}}


def bundle(statement: dict, pair) -> bytes:
    key = keys.load_private(pair[0])
    return bundle_of(sign_envelope(statement, key), key)


def attest_into(store, statement, pair, trust, referrer_byte="1", digest=DIGEST):
    """Verify a real signed bundle with the trust policy and file it, as a pull does."""
    found, signer = verify_trusted(bundle(statement, pair), trust)
    item = {"type": found["predicateType"], "referrer": "sha256:" + referrer_byte * 64,
            "bundle": "sha256:" + "e" * 64, "statement": found, "signer": signer.name,
            "fingerprint": signer.fingerprint, "label": signer.label,
            "signed_at": signed_time(found)}
    return file_attested(store, digest, item, "127.0.0.1:5001", "imagekit/x")


# -- the policy -------------------------------------------------------------------------------

def test_trust_key_names_and_fingerprints(ci, tmp_path):
    trust = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    [key] = trust.keys
    assert key.name == "ci" and key.fingerprint.startswith("sha256:")
    assert key.hint == keys.key_hint(keys.load_public(ci[1]))   # cosign's hint of the key
    assert key.label.startswith("ci ") and key.allows_type(TR) and key.allows_link("build")


def test_env_keys_and_policy_scope(ci, scanner, tmp_path):
    ci_pub, scan_pub = _public_named(ci, tmp_path, "ci"), _public_named(scanner, tmp_path, "sc")
    fingerprint = load_trust([scan_pub], env={}).keys[0].fingerprint
    policy = tmp_path / "trust.yaml"
    policy.write_text(f"""keys:
  - name: ci
    key: {ci_pub.name}
    types: [test-result, promotion]
    links: [build, probes]
    acceptances: false
  - name: scanner
    fingerprint: {fingerprint}
    types: [sbom, "cluster-*"]
""")
    trust = load_trust([], policy, env={"IMAGEKIT_TRUST_KEYS": os.pathsep.join([str(scan_pub)])})
    by = {k.name: k for k in trust.keys}
    assert set(by) == {"ci", "scanner"}
    assert by["ci"].allows_type(TR) and not by["ci"].allows_type("https://cyclonedx.org/bom")
    assert by["ci"].allows_link("probes") and not by["ci"].allows_link("hops")
    assert not by["ci"].acceptances
    assert by["scanner"].allows_type("https://imagekit.dev/attestation/cluster-probe/v0.1")
    assert not by["scanner"].allows_type(TR)
    toml = tmp_path / "trust.toml"
    toml.write_text(f'[[keys]]\nname = "ci"\nkey = "{ci_pub}"\ntypes = ["test-result"]\n')
    assert load_trust([], toml, env={}).keys[0].types == ["test-result"]


@pytest.mark.parametrize("content, message", [
    (b"not a key\n", "not a PEM public key"),
    (None, "PRIVATE key"),                    # the private key given as a trust key
    (b"", "not a PEM public key"),
])
def test_a_trust_key_that_is_not_a_public_key_is_bad_input(ci, tmp_path, content, message):
    path = tmp_path / "bad.pub"
    path.write_bytes(ci[0].read_bytes() if content is None else content)
    with pytest.raises(InvalidInput, match=message):
        load_trust([path], env={})


def test_a_fifo_or_a_directory_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInput, match="not a regular file"):
        load_trust([fifo], env={})
    with pytest.raises(InvalidInput, match="not a regular file"):
        load_trust([], tmp_path, env={})


@pytest.mark.parametrize("text, message", [
    ("keys: []\n", "keys"),
    ("keys:\n  - name: ci\n", "exactly one of"),
    ("keys:\n  - name: ci\n    fingerprint: sha256:" + "0" * 64 + "\n", "no --trust-key"),
    ("keys:\n  - name: ci\n    key: x.pub\n    colour: red\n", "colour"),
    ("keys: [\n", "does not parse"),
])
def test_bad_policies_are_one_line(tmp_path, text, message):
    policy = tmp_path / "trust.yaml"
    policy.write_text(text)
    with pytest.raises(InvalidInput, match=message):
        load_trust([], policy, env={})


def test_short_types_and_signed_time():
    assert short_type(TR) == "test-result" and short_type(PROMO) == "promotion"
    assert short_type("https://imagekit.dev/attestation/cluster-accept/v0.1") == "cluster-accept"
    assert signed_time(tr_statement(minutes=5)).startswith("2026-12-01T12:05:00")
    assert signed_time({"predicate": {"metadata": {"timestamp": "2026-12-01T12:00:00Z"}}})
    assert signed_time({"predicate": {}}) is None


# -- verifying bundles with a policy ----------------------------------------------------------

def test_another_signers_bundle_is_ignored_not_failed(ci, scanner, tmp_path):
    trust = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    statement, signer = verify_trusted(bundle(tr_statement(), ci), trust)
    assert signer.name == "ci" and statement["predicate"]["result"] == "PASSED"
    with pytest.raises(Untrusted) as untrusted:
        verify_trusted(bundle(tr_statement(), scanner), trust)
    # named as every other line names a signer: the key's fingerprint, never its cosign hint
    known = load_trust([_public_named(scanner, tmp_path, "scanner")], env={}).keys[0]
    assert str(untrusted.value) == "key " + known.label.removeprefix("scanner ")
    assert "hint" not in str(untrusted.value)


def test_a_bundle_claiming_the_trusted_key_but_changed_is_refused(ci, tmp_path):
    trust = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    data = bundle(tr_statement(result="FAILED", failed=["probe:pip_check"]), ci)
    import base64
    import json
    doc = json.loads(data)
    payload = json.loads(base64.b64decode(doc["dsseEnvelope"]["payload"]))
    payload["predicate"]["result"] = "PASSED"
    doc["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    with pytest.raises(EnvelopeError, match="changed at the registry"):
        verify_trusted(json.dumps(doc).encode(), trust)


def test_freshness_is_the_signed_time_not_the_listing_order():
    old = {"referrer": "sha256:" + "9" * 64, "signed_at": signed_time(tr_statement(minutes=0))}
    new = {"referrer": "sha256:" + "1" * 64, "signed_at": signed_time(tr_statement(minutes=9))}
    assert newest([new, old])[0] is new and newest([old, new])[0] is new


def test_acceptances_are_honoured_only_when_the_policy_says_so():
    accepted = tr_statement(result="FAILED", failed=["probe:torch_arch"], acceptances=[
        {"test": "probe:torch_arch", "status": "FAIL", "reason": "stand-in CPU torch",
         "profile": "local", "spec_digest": "sha256:" + "5" * 64}])
    honoured = check_test_result(accepted, honour_acceptances=True, signer="ci")
    assert honoured.status is Status.PASS and "accepted by profile local" in honoured.detail
    refused = check_test_result(accepted, honour_acceptances=False, signer="ci")
    assert refused.status is Status.FAIL and "not honoured" in refused.detail
    partly = tr_statement(result="FAILED", failed=["probe:torch_arch", "probe:pip_check"],
                         acceptances=accepted["predicate"]["acceptances"])
    assert check_test_result(partly, honour_acceptances=True).status is Status.FAIL


def test_require_is_checked_against_a_test_result_too():
    statement = tr_statement()
    missing = link_shown_by_tests(statement, "gpu-preflight", honour_acceptances=True)
    assert missing.status is Status.FAIL and "missing" in missing.detail
    assert link_shown_by_tests(statement, "probes", honour_acceptances=True).status is Status.PASS
    failing = tr_statement(result="FAILED", failed=["gpu-preflight:allreduce"])
    assert link_shown_by_tests(failing, "gpu-preflight", honour_acceptances=True).status \
        is Status.FAIL


def _promotion(required, forced=None):
    return {"predicate": {"digest": str(DIGEST), "media_type": "x", "links": [
        {"name": "build", "status": "PASS"}, {"name": "hops", "status": "PASS"}],
        "hops": [], "required": required, "generated": _time(0), "forced": forced}}


def test_a_forced_or_linkless_chain_fails_verification(ci, tmp_path):
    assert all(c.status is Status.PASS for c in check_promotion(_promotion(["build"]), DIGEST))
    empty = check_promotion(_promotion([]), DIGEST)
    assert any(c.status is Status.FAIL and "required no link" in c.detail for c in empty)
    forced = check_promotion(_promotion(["build"], forced="hotfix"), DIGEST)
    assert any(c.status is Status.FAIL and "--force" in c.detail for c in forced)
    policy = tmp_path / "p.yaml"
    policy.write_text(f"keys:\n  - name: ci\n    key: {ci[1]}\n    links: [hops]\n")
    scoped = load_trust([], policy, env={}).keys[0]
    out = check_promotion(_promotion(["build"]), DIGEST, signer=scoped)
    assert any(c.status is Status.FAIL and "not trusted to vouch for link build" in c.detail
               for c in out)


def _phase_found(ci, verdict="PASS", digest=DIGEST, fingerprint=None):
    """One verified cluster-probe statement as read_attestations lists it."""
    predicate = {"phase": "cluster-probe", "digest": str(digest), "reference": "r/x:v1",
                 "cluster": "https://127.0.0.1:6443", "node": "gpu-1", "status": verdict,
                 "verdict": verdict, "checks": [], "generated": _time(0)}
    return {"type": "https://imagekit.dev/attestation/cluster-probe/v1", "referrer": "sha256:"
            + "ef" * 32, "statement": {"predicate": predicate}, "label": "operator",
            "fingerprint": fingerprint, "signed_at": _time(0)}


def test_a_cluster_link_absent_at_promotion_is_shown_by_a_later_signed_phase(ci, tmp_path):
    """The chain is signed before the cluster probe runs: its cluster-imageid link is ABSENT
    then, and the operator's trusted cluster-probe statement about the digest shows it later.
    Without that statement, or with one whose verdict is FAIL or about another digest, the link
    FAILs."""
    from imagekit.attest.verify import later_links

    chain = _promotion(["build", "cluster-imageid"])
    chain["predicate"]["links"].append({"name": "cluster-imageid", "status": "ABSENT",
                                        "detail": "no evidence"})
    trust = load_trust([_public_named(ci, tmp_path, "operator")], env={})
    fingerprint = trust.keys[0].fingerprint

    def link(found):
        out = check_promotion(chain, DIGEST, later=later_links(found, DIGEST, trust))
        return next(c for c in out if c.name == "link cluster-imageid")

    shown = link([_phase_found(ci, fingerprint=fingerprint)])
    assert shown.status is Status.PASS and "cluster-probe statement signed by operator" in \
        shown.detail and "on node gpu-1" in shown.detail
    assert link([]).status is Status.FAIL                                   # no statement
    assert link([_phase_found(ci, "FAIL", fingerprint=fingerprint)]).status is Status.FAIL
    assert link([_phase_found(ci, digest=OTHER, fingerprint=fingerprint)]).status is Status.FAIL
    policy = tmp_path / "p.yaml"                # a key not trusted for the link cannot show it
    policy.write_text(f"keys:\n  - name: operator\n    key: {ci[1]}\n    links: [hops]\n")
    scoped = load_trust([], policy, env={})
    out = check_promotion(chain, DIGEST, later=later_links(
        [_phase_found(ci, fingerprint=fingerprint)], DIGEST, scoped))
    assert next(c for c in out if c.name == "link cluster-imageid").status is Status.FAIL


# -- the gate from signed facts ---------------------------------------------------------------

def test_gate_allows_from_a_trusted_statement_and_names_its_signer(ci, tmp_path):
    store = EvidenceStore(tmp_path / "ev")
    trust = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    attest_into(store, tr_statement(), ci, trust)
    decision = check_promotable(store, DIGEST, trust=trust)
    assert decision.allowed, decision.reasons
    assert any("signed by ci" in s and "127.0.0.1:5001" in s for s in decision.sources)
    assert any(s.startswith("probe: ") and "PASS" in s for s in decision.sources)


def test_gate_without_trust_refuses_a_store_holding_only_signed_statements(ci, tmp_path):
    store = EvidenceStore(tmp_path / "ev")
    trust = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    attest_into(store, tr_statement(), ci, trust)
    decision = check_promotable(store, DIGEST)
    assert not decision.allowed and "give --trust-key" in "; ".join(decision.reasons)
    with pytest.raises(CheckFailed):
        enforce(store, DIGEST)


def test_gate_with_a_wrong_key_refuses_and_names_the_ignored(ci, scanner, tmp_path):
    store = EvidenceStore(tmp_path / "ev")
    trust_ci = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    attest_into(store, tr_statement(), ci, trust_ci)
    wrong = load_trust([_public_named(scanner, tmp_path, "scanner")], env={})
    decision = check_promotable(store, DIGEST, trust=wrong)
    assert not decision.allowed
    assert "no statement signed by a trusted key" in "; ".join(decision.reasons)
    assert any("not trusted here: ignored" in x for x in decision.ignored)


def test_gate_refuses_a_trusted_fail_unless_a_trusted_acceptance_covers_it(ci, tmp_path):
    pub = _public_named(ci, tmp_path, "ci")
    failing = tr_statement(result="FAILED", passed=["probe:pip_check", "images-verify:verdict"],
                          failed=["probe:torch_arch"])
    store = EvidenceStore(tmp_path / "a")
    attest_into(store, failing, ci, load_trust([pub], env={}))
    decision = check_promotable(store, DIGEST, trust=load_trust([pub], env={}))
    assert not decision.allowed
    assert any("probe:torch_arch FAIL" in r and "signed by ci" in r for r in decision.reasons)
    accepted = dict(failing)
    accepted["predicate"] = dict(failing["predicate"], acceptances=[
        {"test": "probe:torch_arch", "status": "FAIL", "reason": "stand-in CPU torch",
         "profile": "local", "spec_digest": None}])
    store = EvidenceStore(tmp_path / "b")
    attest_into(store, accepted, ci, load_trust([pub], env={}))
    decision = check_promotable(store, DIGEST, trust=load_trust([pub], env={}))
    assert decision.allowed, decision.reasons
    assert any("accepted" in w and "stand-in CPU torch" in w for w in decision.warnings)
    policy = tmp_path / "p.yaml"
    policy.write_text(f"keys:\n  - name: ci\n    key: {pub}\n    acceptances: false\n")
    strict = load_trust([], policy, env={})
    assert not check_promotable(store, DIGEST, trust=strict).allowed


def test_the_newest_signed_statement_decides_whatever_the_order(ci, tmp_path):
    pub = _public_named(ci, tmp_path, "ci")
    trust = load_trust([pub], env={})
    store = EvidenceStore(tmp_path / "ev")
    # filed newest first: index order would pick the PASSED one; the signed time picks FAILED
    attest_into(store, tr_statement(minutes=1), ci, trust, referrer_byte="1")
    attest_into(store, tr_statement(result="FAILED", failed=["probe:pip_check"], minutes=9,
                                   passed=["images-verify:verdict"]),
                ci, trust, referrer_byte="2")
    decision = check_promotable(store, DIGEST, trust=trust)
    assert not decision.allowed
    assert any("superseded" in x for x in decision.ignored)


def test_a_statement_about_another_digest_never_counts(ci, tmp_path):
    trust = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    store = EvidenceStore(tmp_path / "ev")
    attest_into(store, tr_statement(digest=OTHER), ci, trust)   # filed under DIGEST by a liar
    decision = check_promotable(store, DIGEST, trust=trust)
    assert not decision.allowed
    assert any("not about" in x for x in decision.ignored)


def test_refused_and_missing_referrers_from_the_pull(ci, tmp_path):
    trust = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    store = EvidenceStore(tmp_path / "ev")
    attest_into(store, tr_statement(), ci, trust)
    changed = CheckResult(name="attestation test-result sha256:9999", status=Status.FAIL,
                          detail="bundle blob does not hash to its digest",
                          data={"problem": "refused"})
    missing = CheckResult(name="attestation sbom sha256:8888", status=Status.FAIL,
                          detail="blob unknown", data={"problem": "unavailable"})

    class Pulled:
        registry, repository = "127.0.0.1:5001", "imagekit/x"

        def __init__(self, problems):
            self.problems = problems

    refused = check_promotable(store, DIGEST, trust=trust,
                               pull=lambda *a: Pulled([changed]))
    assert not refused.allowed and "does not hash" in "; ".join(refused.reasons)
    named = check_promotable(store, DIGEST, trust=trust, pull=lambda *a: Pulled([missing]))
    assert named.allowed and any("no evidence from it" in w for w in named.warnings)
    empty = EvidenceStore(tmp_path / "empty")
    nothing = check_promotable(empty, DIGEST, trust=trust, pull=lambda *a: Pulled([missing]))
    assert not nothing.allowed and "no statement signed" in "; ".join(nothing.reasons)


def test_image_phase_gate_and_signing_links(ci, tmp_path):
    trust = load_trust([_public_named(ci, tmp_path, "ci")], env={})
    store = EvidenceStore(tmp_path / "ev")
    attest_into(store, tr_statement(passed=["probe:pip_check", "images-verify:verdict",
                                           "build:build"]), ci, trust)
    assert image_phase_gate(store, DIGEST, trust=trust).allowed
    with pytest.raises(CheckFailed, match="--trust-key"):
        image_phase_gate(store, DIGEST)
    # a chain signed over links the evidence holds passes; over one it lacks, it is refused
    assert check_promotable(store, DIGEST, trust=trust,
                            sign_links=["build", "probes", "hops"]).allowed
    bare = EvidenceStore(tmp_path / "bare")   # no images-verify: base identity is not held
    attest_into(bare, tr_statement(passed=["probe:pip_check", "build:build"]), ci, trust)
    assert check_promotable(bare, DIGEST, ["probe"], trust=trust).allowed
    lacking = check_promotable(bare, DIGEST, ["probe"], trust=trust,
                               sign_links=["base-identity", "build"])
    assert not lacking.allowed and "link base-identity" in "; ".join(lacking.reasons)
    assert not check_promotable(store, DIGEST, trust=trust, sign_links=[]).allowed


@pytest.mark.parametrize("argv", [
    ["promote", "127.0.0.1:1/x:1", "--to", "127.0.0.1:1/y:1"],
    ["gate", "127.0.0.1:1/x:1"],
    ["report", "127.0.0.1:1/x:1"],
    ["verify-attestations", "127.0.0.1:1/x:1"],
    ["evidence", "pull", "127.0.0.1:1/x:1"],
    ["cluster", "accept", "127.0.0.1:1/x:1"],
    ["cluster", "probe", "127.0.0.1:1/x:1"],
    ["cluster", "gpu-preflight", "127.0.0.1:1/x:1"],
])
def test_every_command_refuses_a_trust_key_that_is_not_a_public_key(argv, ci, tmp_path,
                                                                     monkeypatch):
    """One line, exit 2, before any registry or cluster is asked (127.0.0.1:1 answers
    nothing: reaching it would be a different error)."""
    from typer.testing import CliRunner

    from imagekit.cli import app

    monkeypatch.setenv("IMAGEKIT_EVIDENCE_DIR", str(tmp_path / "ev"))
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    done = CliRunner().invoke(app, [*argv, "--trust-key", str(ci[0])])
    assert done.exit_code == 2, done.output
    lines = done.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: not a PEM public key")
    monkeypatch.setenv("IMAGEKIT_TRUST_KEYS", str(tmp_path / "absent.pub"))
    done = CliRunner().invoke(app, argv)
    assert done.exit_code == 2 and "cannot read the trust key" in done.output, done.output


def test_a_trusted_acceptance_covers_the_same_probe_measured_here_on_the_cluster(ci, tmp_path):
    """The operator's store holds its own cluster probe (in-Pod torch_arch FAIL on CPU torch)
    and CI's signed statement accepting that probe's FAIL: cluster accept's gate allows it, as
    the spec's acceptance would on CI's machine. Without the signed acceptance it refuses."""
    from imagekit.evidence.kinds import ClusterProbeResult

    pub = _public_named(ci, tmp_path, "ci")
    trust = load_trust([pub], env={})
    failing = tr_statement(result="FAILED", failed=["probe:torch_arch"],
                          passed=["probe:pip_check", "images-verify:verdict", "build:build"])
    accepted = dict(failing, predicate=dict(failing["predicate"], acceptances=[
        {"test": "probe:torch_arch", "status": "FAIL", "reason": "stand-in CPU torch",
         "profile": "local", "spec_digest": None}]))

    def operator_store(name, statement):
        store = EvidenceStore(tmp_path / name)
        attest_into(store, statement, ci, trust)
        with store.attempt(DIGEST, "cluster-probe") as attempt:
            attempt.write_result(ClusterProbeResult(reference="127.0.0.1:5003/imagekit/x:v1"))
            attempt.add_check(CheckResult(name="probe:torch_arch", status=Status.FAIL,
                                          detail="no sm_90 in the CPU torch"))
            attempt.add_check(CheckResult(name="image_id", status=Status.PASS, detail="same"))
        return store

    decision = image_phase_gate(operator_store("accepted", accepted), DIGEST, trust=trust)
    assert decision.allowed, decision.reasons
    with pytest.raises(CheckFailed, match="torch_arch"):
        image_phase_gate(operator_store("not-accepted", failing), DIGEST, trust=trust)
