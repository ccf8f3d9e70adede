"""The main job's journey as processes, the way `make rehearsal` plays it: three actors with
three keys and three evidence stores who share only the registry, and an auditor with a
fourth, empty store — on the real registries and the real cluster the suite starts.

CI (the store that built and verified the vLLM image) attests at staging with its key; the
release engineer (empty store) is refused without trust and with a stranger's key, and
promotes when it trusts CI's key, signing the hop with its own; the operator (empty store)
probes the promoted tag on the cluster (the gate decided from what CI and the release
engineer signed) and signs that phase; the auditor renders every phase from the registry.
The image is the one test_accept_real builds (one build per session)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.clusteraccept import rehearsal as step

from .helpers import image_phase_snapshot

pytestmark = [pytest.mark.cluster, pytest.mark.docker, pytest.mark.registry,
              pytest.mark.slow, pytest.mark.timeout(900)]


def ik(*args: str, store: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    from imagekit.infra.state import load_state

    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGEKIT_RETRY_")}
    env.update(IMAGEKIT_EVIDENCE_DIR=str(store),
               DOCKER_CONFIG=str(load_state().docker_config_dir))
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, env=env)


@pytest.fixture(scope="module")
def actors(tmp_path_factory) -> Path:
    """Each actor's key pair made by `imagekit keys generate`, its public key handed over
    under its name; a stranger's key the release engineer must not be fooled by."""
    root = tmp_path_factory.mktemp("actors")
    for actor in (*step.ACTORS, "stranger"):
        done = ik("keys", "generate", "--out-dir", str(step.key_dir(root, actor)),
                  store=root / "unused")
        assert done.returncode == 0, done.stderr
        shutil.copyfile(step.key_dir(root, actor) / "imagekit.pub",
                        step.public_key(root, actor))
    for actor in (*step.ACTORS[1:], step.AUDITOR):
        step.store_dir(root, actor).mkdir(parents=True)
    yield root
    for actor in (*step.ACTORS, "stranger"):
        step.private_key(root, actor).unlink(missing_ok=True)


def test_three_actors_share_only_the_registry(vllm_image, actors, test_ns, cluster_state):
    tag, digest, ci_store = vllm_image
    # the release engineer's hop: another repository of the same registry, so its 3.7 GB are
    # mounted, not moved (the suite's CI budget); TLS and token hops of a promotion across
    # stores are tests/attest/test_trust_registry.py's and the rehearsal's
    promoted = f"{tag.registry}/{tag.repository}-released:journey-{digest.hex[:12]}"
    release = step.store_dir(actors, "release")
    operator = step.store_dir(actors, "operator")
    auditor = step.store_dir(actors, step.AUDITOR)

    # CI: the store that built and verified the image signs the image phase at staging (the
    # store as images verify left it: test_accept_real's deliberate failures are not CI's)
    done = ik("attest", str(tag), *step.sign_args(actors, "ci"), "--type", "test-result",
              store=image_phase_snapshot(ci_store))
    assert done.returncode == 0, done.stderr

    # the release engineer's empty store: nothing to decide from without trust -> refused
    done = ik("promote", str(tag), "--to", promoted, *step.sign_args(actors, "release"),
              store=release)
    assert done.returncode == 1, done.stdout + done.stderr
    # a key that signed nothing here: CI's statement is ignored (named), still refused
    done = ik("promote", str(tag), "--to", promoted, *step.trust_args(actors, "stranger"),
              *step.sign_args(actors, "release"), store=release)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "signed by a key that is not trusted" in done.stdout + done.stderr
    # CI's key trusted: the gate passes from CI's signed statement, the signer named
    done = ik("promote", str(tag), "--to", promoted, *step.trust_args(actors, "ci"),
              *step.sign_args(actors, "release"), "--json", store=release)
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["digest"] == str(digest) and result["hops"][0]["verified"]
    assert result["hops"][0]["bytes_moved"] < 10_000_000     # mounted, referrers copied
    sources = " ".join((result.get("gate") or {}).get("sources") or [])
    assert "signed by ci" in sources, result.get("gate")
    assert [a["predicate_type"] for a in result["attestations"]] == \
        ["https://imagekit.dev/attestation/promotion/v0.1"]

    # the operator's empty store: cluster probe BY TAG gets past its gate from what CI and the
    # release engineer signed, runs the image in a zero-GPU Pod and signs the phase it saw (the
    # engine's acceptance in Pods, with the rehearsal step's suites: test_accept_real)
    done = ik("cluster", "probe", promoted, "--namespace", test_ns, "--probe",
              "find_spec=vllm", "--json", *step.trust_args(actors, "ci", "release"),
              *step.sign_args(actors, "operator"), store=operator)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["digest"] == str(digest), report
    checks = {c["name"]: c["status"] for c in report["checks"]}
    assert checks["image_id"] == checks["probe:find_spec"] == "PASS", checks
    (signed,) = report["attestations"]
    assert signed["predicate_type"] == "https://imagekit.dev/attestation/cluster-probe/v1"

    # the auditor's empty store: every phase, each naming its signer, rendered from the
    # registry with the three public keys alone
    done = ik("report", promoted, "--format", "json", "--profile", "local",
              *step.trust_args(actors, *step.ACTORS), store=auditor)
    assert done.returncode == 0, done.stdout + done.stderr     # every phase signed and trusted
    chain = json.loads(done.stdout)["chain"]
    # each statement names its signer: the trust name and the key's fingerprint
    by_phase = {(s["phase"], s["name"], s["signer"].split()[0]) for s in chain if s["current"]}
    assert ("image", "test-result", "ci") in by_phase, chain
    assert ("hops", "promotion", "release") in by_phase, chain
    assert ("cluster", "cluster-probe", "operator") in by_phase, chain
