"""Each actor signs its own phase (`--key` of cluster probe / accept / gpu-preflight): the key is
read and judged before anything runs, and the predicate names what the cluster said."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.attest import keys
from imagekit.attest.dsse import envelope_of_bundle, verify_envelope
from imagekit.attest.phase import ClusterPhasePredicate, phase_predicate
from imagekit.attest.statements import NAMES, PHASE_TYPES, statement
from imagekit.oci.digest import Digest
from imagekit.results import CheckReport, CheckResult, Status

DIGEST = Digest.parse("sha256:" + "cd" * 32)

COMMANDS = {
    "cluster probe": ["cluster", "probe", "127.0.0.1:5003/x/y:v1"],
    "cluster accept": ["cluster", "accept", "127.0.0.1:5003/x/y:v1", "--device", "cpu"],
    "cluster gpu-preflight": ["cluster", "gpu-preflight", "127.0.0.1:5003/x/y:v1"],
}


def _run(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    # a kubeconfig that does not exist and no infra state: anything past the key check would
    # fail differently (and a Pod could never be made)
    env = dict(os.environ, KUBECONFIG=str(tmp_path / "no-kubeconfig"),
               IMAGEKIT_STATE_DIR=str(tmp_path / "no-state"),
               IMAGEKIT_EVIDENCE_DIR=str(tmp_path / "evidence"))
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=60, check=False, env=env)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_file_that_is_no_private_key_is_exit_2_before_anything(command, tmp_path):
    bogus = tmp_path / "bogus.key"
    bogus.write_text("not a key\n")
    os.chmod(bogus, 0o600)
    done = _run(*COMMANDS[command], "--key", str(bogus), tmp_path=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: "), lines
    assert "PEM private key" in lines[0] and lines[0].endswith(f"({bogus})"), lines
    assert not (tmp_path / "evidence").exists()       # nothing was recorded either


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_key_readable_by_others_is_refused(command, tmp_path):
    private, _ = keys.generate(tmp_path / "k")
    os.chmod(private, 0o644)
    try:
        done = _run(*COMMANDS[command], "--key", str(private), tmp_path=tmp_path)
    finally:
        private.unlink()
    assert done.returncode == 2
    assert "readable by others" in done.stderr and "Traceback" not in done.stderr


def test_each_node_preflight_cannot_sign_one_phase(tmp_path):
    private, _ = keys.generate(tmp_path / "k")
    try:
        done = _run(*COMMANDS["cluster gpu-preflight"], "--each-node", "--key", str(private),
                    tmp_path=tmp_path)
    finally:
        private.unlink()
    assert done.returncode == 2 and "--each-node" in done.stderr


def test_the_predicate_names_node_image_id_and_verdicts_and_signs(tmp_path):
    report = CheckReport.of("127.0.0.1:5003/x/y:v1", [
        CheckResult(name="resolve", status=Status.PASS, detail="tag v1 resolves"),
        CheckResult(name="pod_completed", status=Status.PASS, detail="pod Succeeded",
                    data={"phase": "Succeeded", "observed": {
                        "node": "node-a", "image": "127.0.0.1:5003/x/y@" + str(DIGEST),
                        "image_id": "127.0.0.1:5003/x/y@" + str(DIGEST)}}),
        CheckResult(name="probe:torch_arch", status=Status.FAIL, detail="sm_90 missing"),
    ], digest=str(DIGEST))
    accepted = [{"check": "probe:torch_arch", "status": "FAIL", "profile": "local",
                 "reason": "stand-in"}]
    predicate = phase_predicate("cluster-probe", report, digest=DIGEST,
                                reference="127.0.0.1:5003/x/y:v1",
                                cluster="https://127.0.0.1:6443", accepted=accepted,
                                verdict=Status.PASS, profile="local")
    assert predicate.node == "node-a" and predicate.image_id.endswith(str(DIGEST))
    assert predicate.status is Status.FAIL and predicate.verdict is Status.PASS
    assert [c.name for c in predicate.checks] == ["resolve", "pod_completed",
                                                  "probe:torch_arch"]
    # signed as the statement the registry carries, verified with the public key alone
    private, public = keys.generate(tmp_path / "k")
    from imagekit.attest.dsse import bundle_of, sign_envelope

    signed = statement(DIGEST, "127.0.0.1:5003/x/y", PHASE_TYPES["cluster-probe"],
                       predicate.model_dump(mode="json"))
    bundle = bundle_of(sign_envelope(signed, keys.load_private(private)),
                       keys.load_private(private))
    got = verify_envelope(envelope_of_bundle(bundle), keys.load_public(public))
    assert got["predicateType"] == "https://imagekit.dev/attestation/cluster-probe/v1"
    assert ClusterPhasePredicate.model_validate(got["predicate"]) == predicate
    assert NAMES[got["predicateType"]] == "cluster-probe"
    private.unlink()


def test_no_pod_ran_means_no_node_and_no_image_id():
    report = CheckReport.of("x", [CheckResult(name="submission", status=Status.DEFERRED,
                                              detail="dry run")], digest=str(DIGEST))
    predicate = phase_predicate("gpu-preflight", report, digest=DIGEST, reference="x",
                                cluster="https://c")
    assert predicate.node is None and predicate.image_id is None
    assert predicate.verdict is Status.DEFERRED
