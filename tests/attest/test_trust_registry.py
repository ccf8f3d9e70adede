"""Evidence that crosses machines: stores that share only the registry.

A "CI" store measures (verify-copy) and attests a digest at staging with key ci; a second
signer ("scanner", its own store, nothing measured) attests the same digest — a FAILED
test-result. Then, from EMPTY stores, as processes against the suite's real registries:
the release engineer's promote trusting ci passes with the signer named; without trust, or
trusting a key that signed nothing, it is refused (exit 1); the scanner's bundles are named and
ignored; a changed bundle byte and a statement about another digest are refused; a missing
bundle blob is no evidence; the auditor's report from an empty store shows every phase.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import uuid
from pathlib import Path

import pytest

from imagekit.attest import keys
from imagekit.attest.publish import sign_and_attach
from imagekit.attest.statements import TEST_RESULT_TYPE
from imagekit.oci.digest import Digest
from imagekit.registry import ClientPool, RegistryOptions
from imagekit.registry.referrers import list_referrers
from tests.registry.images import layer_tar, push_image

from .conftest import imagekit

pytestmark = [pytest.mark.registry]
CLUSTER_PROBE_TYPE = "https://imagekit.dev/attestation/cluster-probe/v0.1"


def _keypair(root: Path, name: str) -> tuple[Path, Path]:
    private, public = keys.generate(root / name)
    named = root / f"{name}.pub"
    shutil.copy(public, named)
    return private, named


@pytest.fixture(scope="module")
def world(infra, tmp_path_factory):
    root = tmp_path_factory.mktemp("trust")
    reg = {name: e.address for name, e in infra.registries.items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_TRUST")}
    env = dict(env, DOCKER_CONFIG=str(infra.docker_config_dir),
               IMAGEKIT_RETRY_WAIT_INITIAL="0.01", IMAGEKIT_RETRY_WAIT_MAX="0.05",
               IMAGEKIT_REQUIRED_CHECKS="verify-copy",
               IMAGEKIT_REQUIRED_LINKS="base-identity,hops")
    keyset = {name: _keypair(root, name) for name in ("ci", "scanner", "release", "nobody",
                                                      "operator")}
    options = RegistryOptions(docker_config=infra.docker_config_dir)

    def image(tag_seed: int, measured: bool = True) -> dict:
        repo = f"trust/{uuid.uuid4().hex[:10]}"
        with ClientPool(options) as pool:
            pushed = push_image(pool.get(reg["staging"]), repo, "v1",
                                [layer_tar(tag_seed, 120_000)])
        ref = f"{reg['staging']}/{repo}:v1"
        ci_env = dict(env, IMAGEKIT_EVIDENCE_DIR=str(root / f"ci-{repo.replace('/', '-')}"))
        if measured:
            done = imagekit("verify-mirror", ref, ref, env=ci_env)   # real evidence
            assert done.returncode == 0, done.stderr
        done = imagekit("attest", ref, "--key", str(keyset["ci"][0]), "--type", "test-result",
                        env=ci_env)
        assert done.returncode == 0, done.stderr
        return {"repo": repo, "ref": ref, "digest": pushed.digest}

    main = image(81)
    scanner_env = dict(env, IMAGEKIT_EVIDENCE_DIR=str(root / "scanner"))
    done = imagekit("attest", main["ref"], "--key", str(keyset["scanner"][0]), "--type",
                    "test-result", env=scanner_env)   # a second signer: FAILED, nothing measured
    assert done.returncode == 0, done.stderr
    yield {"root": root, "reg": reg, "env": env, "keys": keyset, "main": main,
           "image": image, "options": options, "infra": infra}


def _empty(world, name: str) -> dict:
    store = world["root"] / f"empty-{name}-{uuid.uuid4().hex[:6]}"
    return dict(world["env"], IMAGEKIT_EVIDENCE_DIR=str(store))


def _pub(world, name: str) -> str:
    return str(world["keys"][name][1])


def test_release_engineer_promotes_from_an_empty_store_trusting_ci(world):
    main, reg = world["main"], world["reg"]
    env = _empty(world, "release")
    done = imagekit("promote", main["ref"], "--to", f"{reg['production']}/{main['repo']}:v1",
                    "--trust-key", _pub(world, "ci"), "--key",
                    str(world["keys"]["release"][0]), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "gate source: test-result PASSED, signed by ci " in out, out
    assert f"{reg['staging']}/{main['repo']}" in out
    # verify-copy evidence, named today, counted as every report counts
    assert re.search(r"gate source: verify-mirror: \d+ PASS, signed by ci ", out), out
    # the scanner's FAILED test-result: another signer's, named and ignored, never a FAIL
    assert "gate ignored:" in out and "not trusted" in out
    listed = imagekit("evidence", "list", "--kind", "attested", "--json", env=env)
    attested = json.loads(listed.stdout)["attempts"]
    assert len(attested) == 1 and "signed by ci" in attested[0]["summary"]


def test_without_trust_the_empty_store_refuses(world):
    main, reg = world["main"], world["reg"]
    done = imagekit("promote", main["ref"], "--to", f"{reg['production']}/{main['repo']}:no",
                    env=_empty(world, "untrusted"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "promotion refused by the gate: no evidence for" in done.stderr
    assert "--trust-key" in done.stderr


def test_a_wrong_trust_key_refuses_and_names_what_it_ignored(world):
    main = world["main"]
    done = imagekit("promote", main["ref"], "--to",
                    f"{world['reg']['production']}/{main['repo']}:wrong",
                    "--trust-key", _pub(world, "nobody"), env=_empty(world, "wrong"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "no statement signed by a trusted key (nobody " in done.stderr
    assert "[ignored: attestation test-result" in done.stderr   # ci's and scanner's, named


def test_trusting_the_scanner_its_failed_statement_refuses(world):
    done = imagekit("gate", world["main"]["ref"], "--trust-key", _pub(world, "scanner"),
                    env=_empty(world, "scanner"))
    assert done.returncode == 1, done.stdout
    assert "evidence: no attempt about" in done.stdout and "signed by scanner" in done.stdout


def test_verify_with_one_key_ignores_the_other_signer(world):
    done = imagekit("verify-attestations", world["main"]["ref"], "--trust-key", _pub(world, "ci"), "--require-type",
                    "test-result", env=world["env"])
    assert done.returncode == 0, done.stdout
    assert "ignored" in done.stdout and "not trusted" in done.stdout
    # --require applies to a test-result too: no GPU preflight was signed
    done = imagekit("verify-attestations", world["main"]["ref"], "--trust-key", _pub(world, "ci"), "--require-type",
                    "test-result", "--require-link", "gpu-preflight", env=world["env"])
    assert done.returncode == 1, done.stdout
    assert "FAIL     required gpu-preflight (test-result): missing" in done.stdout


def test_signing_a_chain_over_links_the_evidence_lacks_is_refused(world):
    main, reg = world["main"], world["reg"]
    env = dict(_empty(world, "links"), IMAGEKIT_REQUIRED_LINKS="base-identity,build,hops")
    done = imagekit("promote", main["ref"], "--to", f"{reg['production']}/{main['repo']}:l",
                    "--trust-key", _pub(world, "ci"), "--key",
                    str(world["keys"]["release"][0]), env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot sign the promotion chain over link build" in done.stderr


def test_evidence_pull_files_each_verified_statement(world):
    env = _empty(world, "pull")
    done = imagekit("evidence", "pull", world["main"]["ref"], "--trust-key", _pub(world, "ci"),
                    "--json", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    pulled = json.loads(done.stdout)
    assert len(pulled["filed"]) == 1 and len(pulled["ignored"]) == 1
    again = json.loads(imagekit("evidence", "pull", world["main"]["ref"], "--trust-key",
                                _pub(world, "ci"), "--json", env=env).stdout)
    assert again["filed"] == [] and len(again["already"]) == 1   # filed once


def _bundle(world, image) -> tuple[Digest, Path]:
    with ClientPool(world["options"]) as pool:
        client = pool.get(world["reg"]["staging"])
        for entry in list_referrers(client, image["repo"], image["digest"]):
            manifest = json.loads(client.get_manifest(image["repo"],
                                                      Digest.parse(entry["digest"])).data)
            layer = Digest.parse(manifest["layers"][0]["digest"])
            data = (Path(world["infra"].state_dir) / "registries" / "staging" / "data" /
                    "docker" / "registry" / "v2" / "blobs" / "sha256" / layer.hex[:2] /
                    layer.hex / "data")
            return Digest.parse(entry["digest"]), data
    raise AssertionError("no referrer")


def test_a_changed_bundle_byte_at_the_registry_refuses(world):
    image = world["image"](82, measured=False)
    referrer, data_file = _bundle(world, image)
    original = data_file.read_bytes()
    at = original.index(b'"payload":"') + 40
    data_file.write_bytes(original[:at] + (b"A" if original[at:at + 1] != b"A" else b"B")
                          + original[at + 1:])
    done = imagekit("gate", image["ref"], "--trust-key", _pub(world, "ci"),
                    env=_empty(world, "tamper"))
    assert done.returncode == 1, done.stdout
    assert f"attestation test-result {referrer.short}" in done.stdout
    assert "does not hash to its digest" in done.stdout


def _blob_file(world, digest: Digest) -> Path:
    return (Path(world["infra"].state_dir) / "registries" / "staging" / "data" / "docker" /
            "registry" / "v2" / "blobs" / "sha256" / digest.hex[:2] / digest.hex / "data")


def test_a_truncated_or_missing_bundle_blob_is_named_and_no_evidence(world):
    """A second ci statement whose blob is cut short at the registry is named and counts for
    nothing (the good one still decides); with the good one's blob gone too, nothing trusted
    is left: refused, never a pass."""
    image = world["image"](83)
    good, good_file = _bundle(world, image)
    older = {"_type": "https://in-toto.io/Statement/v1",
             "subject": [{"name": "x", "digest": {"sha256": image["digest"].hex}}],
             "predicateType": TEST_RESULT_TYPE,
             "predicate": {"result": "PASSED", "passedTests": ["verify-copy:x"],
                           "failedTests": [], "warnedTests": [], "configuration": [],
                           "timestamp": "2026-01-01T00:00:00+00:00"}}
    with ClientPool(world["options"]) as pool:
        client = pool.get(world["reg"]["staging"])
        attached = sign_and_attach(client, image["repo"],
                                   client.get_manifest(image["repo"], image["digest"]), older,
                                   keys.load_private(world["keys"]["ci"][0]))
    cut = _blob_file(world, Digest.parse(attached.bundle))
    cut.write_bytes(cut.read_bytes()[:100])
    done = imagekit("gate", image["ref"], "--trust-key", _pub(world, "ci"),
                    env=_empty(world, "truncated"))
    assert done.returncode == 0, done.stdout
    # distribution still announces the full length: the transfer is cut (a shorter body
    # served whole would read "is truncated at the registry (100 of … bytes)"); either way
    # that statement is named and is no evidence
    named = [x for x in done.stdout.splitlines() if Digest.parse(attached.manifest).short in x]
    assert named and "(no evidence from it)" in named[0], done.stdout
    assert "warning:" in named[0] and ("connection broken" in named[0] or "truncated" in
                                       named[0])
    good_file.unlink()
    done = imagekit("gate", image["ref"], "--trust-key", _pub(world, "ci"),
                    env=_empty(world, "missing"))
    assert done.returncode == 1, done.stdout
    assert good.short in done.stdout and "no statement signed by a trusted key" in done.stdout


def test_a_statement_about_another_digest_refuses(world):
    image = world["image"](84)
    other = Digest.parse("sha256:" + "cd" * 32)
    statement = {"_type": "https://in-toto.io/Statement/v1",
                 "subject": [{"name": "x", "digest": {"sha256": other.hex}}],
                 "predicateType": TEST_RESULT_TYPE,
                 "predicate": {"result": "PASSED", "passedTests": ["verify-copy:x"],
                               "failedTests": [], "warnedTests": [], "configuration": [],
                               "timestamp": dt.datetime.now(dt.UTC).isoformat()}}
    with ClientPool(world["options"]) as pool:
        client = pool.get(world["reg"]["staging"])
        subject = client.get_manifest(image["repo"], image["digest"])
        sign_and_attach(client, image["repo"], subject, statement,
                        keys.load_private(world["keys"]["ci"][0]))
    done = imagekit("gate", image["ref"], "--trust-key", _pub(world, "ci"),
                    env=_empty(world, "other"))
    assert done.returncode == 1, done.stdout
    assert "the signed statement's subject is not the served digest" in done.stdout


def test_the_auditor_reports_every_phase_from_an_empty_store(world):
    main, reg = world["main"], world["reg"]
    production = f"{reg['production']}/{main['repo']}:v1"
    # the operator's phase, in the actors' generic shape (any predicate type renders)
    statement = {"_type": "https://in-toto.io/Statement/v1",
                 "subject": [{"name": production, "digest": {"sha256": main["digest"].hex}}],
                 "predicateType": CLUSTER_PROBE_TYPE,
                 "predicate": {"result": "PASS", "cluster": "127.0.0.1:6443",
                               "node": "127.0.0.1", "imageID": str(main["digest"]),
                               "timestamp": dt.datetime.now(dt.UTC).isoformat()}}
    with ClientPool(world["options"]) as pool:
        client = pool.get(reg["production"])
        subject = client.get_manifest(main["repo"], main["digest"])
        sign_and_attach(client, main["repo"], subject, statement,
                        keys.load_private(world["keys"]["operator"][0]))
    done = imagekit("report", production, "--trust-key", _pub(world, "ci"), "--trust-key",
                    _pub(world, "release"), "--trust-key", _pub(world, "operator"),
                    env=_empty(world, "auditor"))
    assert done.returncode == 0, done.stderr
    page = done.stdout
    assert "## Signed chain (from the registry)" in page
    image_phase = page.split("### Image phase")[1].split("### Hops")[0]
    assert "**test-result** signed by ci " in image_phase and "result PASSED" in image_phase
    hops = page.split("### Hops (promotion chain)")[1].split("### Cluster phase")[0]
    assert "**promotion** signed by release " in hops and "link base-identity: PASS" in hops
    assert "signed by ci" in hops     # the chain's link names where its fact came from
    cluster = page.split("### Cluster phase")[1]
    assert "**cluster-probe** signed by operator " in cluster and "node: 127.0.0.1" in cluster
    gate = page.split("## Promotion gate")[1].split("##")[0]
    assert "**Allowed: promoted**" in gate and "source: test-result PASSED, signed by ci" in gate
    # the same page trusting ci alone: the other phases' signers are not trusted
    done = imagekit("report", production, "--trust-key", _pub(world, "ci"),
                    env=_empty(world, "auditor-ci"))
    assert done.returncode == 0 and "**promotion** signed by" not in done.stdout


def test_the_newest_signed_statement_decides_not_the_listing(world):
    """CI's test-result (PASSED, signed now) sits between an older FAILED one and,
    later, a newer FAILED one, all signed by ci. The newest by signed time decides: first
    PASSED (the older FAILED named superseded), then FAILED — whatever the index order."""
    from imagekit.attest.verify import verify_reference
    from imagekit.oci import ImageReference
    from imagekit.results import Status
    from imagekit.trust import load_trust

    image = world["image"](85)
    now = dt.datetime.now(dt.UTC)
    ci_key = keys.load_private(world["keys"]["ci"][0])
    trust = load_trust([Path(_pub(world, "ci"))], env={})
    ref = ImageReference.parse(image["ref"])

    def failed(minutes: int) -> dict:
        return {"_type": "https://in-toto.io/Statement/v1",
                "subject": [{"name": "x", "digest": {"sha256": image["digest"].hex}}],
                "predicateType": TEST_RESULT_TYPE,
                "predicate": {"result": "FAILED", "passedTests": [], "warnedTests": [],
                              "failedTests": ["verify-copy:x"], "configuration": [],
                              "timestamp": (now + dt.timedelta(minutes=minutes)).isoformat()}}

    with ClientPool(world["options"]) as pool:
        client = pool.get(world["reg"]["staging"])
        subject = client.get_manifest(image["repo"], image["digest"])
        sign_and_attach(client, image["repo"], subject, failed(-60), ci_key)  # listed last
        report = verify_reference(ref, trust, types=["test-result"], pool=pool)
        assert report.status is Status.PASS, [c for c in report.checks]
        assert any("superseded" in c.name for c in report.checks)
        sign_and_attach(client, image["repo"], subject, failed(+60), ci_key)
        report = verify_reference(ref, trust, types=["test-result"], pool=pool)
        assert report.status is Status.FAIL
        assert any(c.name == "test-result" and c.detail.startswith("FAILED (signed by ci")
                   for c in report.checks)
