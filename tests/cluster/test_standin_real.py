"""The record's section 5 end to end: the FIXED stand-ins (built, pushed and probed by the image
phase — warm from tests/build's content-keyed caches), promoted staging → production → target
by `imagekit.promote`, then run on the cluster by tag: the Pod is pinned to the digest, imageID
matches, and the project's own probes pass inside the Pod. For vLLM that is the real vLLM 0.32
server: its own "Failed to infer device type" on this zero-GPU node, kept, and the CPU re-check
(CPU_PASS_GPU_CLI_DEFERRED)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_cluster_real import by_name, cli

pytestmark = [pytest.mark.cluster, pytest.mark.docker, pytest.mark.registry,
              pytest.mark.timeout(1500),
              pytest.mark.usefixtures("as_operator")]

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/


def _fixed_in_target(name, cluster_state, verified_images):
    """The run's one verified `name` (tests/conftest.py `verified_images`), promoted."""
    from imagekit.oci import ImageReference
    from imagekit.promote.copy import promote
    from imagekit.spec import load_spec

    spec = load_spec(ASSETS / "dockerfiles" / "images.toml")
    entry = verified_images.entry(name)
    assert entry.digest, f"the fixed {name} stand-in was not built: {entry.checks}"
    source = ImageReference.parse(entry.reference)
    repository = spec.images[name].repository
    tag = "cluster-probe"
    via = [ImageReference.parse(f"{cluster_state.registry('production').address}/"
                                f"{repository}:{tag}")]
    to = ImageReference.parse(f"{cluster_state.registry('target').address}/{repository}:{tag}")
    from imagekit.registry import ClientPool, RegistryOptions

    staging = cluster_state.registry("staging").address
    with ClientPool(RegistryOptions(ca_file=cluster_state.ca_file,
                                    docker_config=cluster_state.docker_config_dir,
                                    insecure=frozenset({staging}))) as pool:
        result = promote(source, via, to, pool=pool)
    assert result.digest == entry.digest
    return to, entry.digest, spec.images[name]


@pytest.fixture(scope="session")
def fixed_sglang_in_target(cluster_state, verified_images):
    return _fixed_in_target("sglang", cluster_state, verified_images)


@pytest.fixture(scope="session")
def fixed_vllm_in_target(cluster_state, verified_images):
    return _fixed_in_target("vllm", cluster_state, verified_images)


def test_fixed_standin_runs_from_target_by_tag(fixed_sglang_in_target, tmp_path,
                                               test_ns) -> None:
    """By tag, with the spec's probes for imagekit/sglang (found from the repository); the
    stand-in's CPU torch FAILs torch_arch for real, which the local profile accepts."""
    reference, digest, image = fixed_sglang_in_target
    result = cli("cluster", "probe", str(reference), "--expect-digest", digest,
                 "--namespace", test_ns, "--pod-timeout", "600", "--json",
                 "--spec", str(ASSETS / "dockerfiles" / "images.toml"), "--profile", "local",
                 env_extra={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path)}, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    checks = by_name(doc["checks"])
    assert doc["digest"] == digest
    assert checks["image_id"]["status"] == "PASS"
    assert checks["image_id"]["data"]["image_id"].endswith("@" + digest)
    for probe in image.probes:
        expected = "FAIL" if probe == "torch_arch" else "PASS"
        assert checks[f"probe:{probe}"]["status"] == expected, checks[f"probe:{probe}"]
    assert doc["accepted"] == [{"check": "probe:torch_arch", "status": "FAIL",
                                "reason": doc["accepted"][0]["reason"], "profile": "local"}]
    assert "sm_90" in doc["accepted"][0]["reason"]
    assert "nixl" in json.dumps(checks["probe:find_spec"]["data"])
    assert checks["cleanup"]["status"] == "PASS"
    # without the profile's acceptance the real FAIL decides the exit code
    strict = cli("cluster", "probe", str(reference), "--namespace", test_ns, "--json",
                 "--spec", str(ASSETS / "dockerfiles" / "images.toml"), "--profile", "production",
                 env_extra={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path)}, timeout=900)
    assert strict.returncode == 1, strict.stdout + strict.stderr


def test_fixed_vllm_runs_the_real_vllm_from_target_by_tag(fixed_vllm_in_target, tmp_path,
                                                          test_ns) -> None:
    """The real vLLM in a zero-GPU Pod: its own device-inference failure is kept, the CPU
    re-check passes (CPU_PASS_GPU_CLI_DEFERRED), the CPU torch FAILs torch_arch; both accepted
    only by the local profile."""
    reference, digest, image = fixed_vllm_in_target
    spec_file = str(ASSETS / "dockerfiles" / "images.toml")
    result = cli("cluster", "probe", str(reference), "--expect-digest", digest,
                 "--namespace", test_ns, "--pod-timeout", "600", "--json",
                 "--spec", spec_file, "--profile", "local",
                 env_extra={"IMAGEKIT_EVIDENCE_DIR": str(tmp_path)}, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    checks = by_name(doc["checks"])
    assert doc["digest"] == digest
    assert checks["image_id"]["data"]["image_id"].endswith("@" + digest)
    expected = {"cli_help": "DEFERRED", "torch_arch": "FAIL"}
    for probe in image.probes:
        assert checks[f"probe:{probe}"]["status"] == expected.get(probe, "PASS"), \
            checks[f"probe:{probe}"]
    assert sorted(a["check"] for a in doc["accepted"]) == ["probe:cli_help", "probe:torch_arch"]
    cli_help = json.dumps(checks["probe:cli_help"]["data"])
    assert "CPU_PASS_GPU_CLI_DEFERRED" in cli_help
    assert "RuntimeError: Failed to infer device type" in cli_help
    assert checks["cleanup"]["status"] == "PASS"
    # both accepted by the local profile alone; that the production profile's run then exits 1
    # is shown on SGLang's Pod above (one vLLM Pod less: the same judgement of the same record)
    assert {a["profile"] for a in doc["accepted"]} == {"local"}
