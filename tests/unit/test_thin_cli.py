"""The grammars and answers the cluster commands share, each written once:
tolerations, `--probe` choices, image facts (imagekit.inputs), tag -> digest
(imagekit.names.digest_of), the preemption rule (imagekit.cluster.precheck), the options each
`cluster gpu-preflight` mode refuses (imagekit.cli.cluster.PREFLIGHT_MODES)."""

from __future__ import annotations

import pytest

from imagekit.errors import InvalidInput
from imagekit.oci import Digest, ImageReference

D = Digest.parse("sha256:" + "a" * 64)


def test_tolerations_grammar() -> None:
    from imagekit.inputs import tolerations

    assert tolerations(None) == []
    assert tolerations(["nvidia.com/gpu:NoSchedule", "pool=a100:NoExecute"]) == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "pool", "operator": "Equal", "value": "a100", "effect": "NoExecute"}]
    for bad in ("nvidia.com/gpu", "x:Sometimes", ":NoSchedule"):
        with pytest.raises(InvalidInput, match="toleration must look like"):
            tolerations([bad])


def test_probe_choices_grammar() -> None:
    from imagekit.inputs import probe_choices

    assert probe_choices(None) is None and probe_choices([]) is None
    assert probe_choices(["pip_check", "find_spec=nixl,sglang", "cli_help="]) == [
        ("pip_check", []), ("find_spec", ["nixl", "sglang"]), ("cli_help", [])]


def test_image_facts_grammar() -> None:
    from imagekit.inputs import image_facts

    assert image_facts(None, None) == {}
    assert image_facts(" 12.8 ", "sm_80, sm_90a,") == {"image_cuda": "12.8",
                                                      "image_arch": ["sm_80", "sm_90a"]}
    with pytest.raises(InvalidInput, match="--image-cuda must look like 12.8"):
        image_facts("twelve", None)
    with pytest.raises(InvalidInput, match="--image-arch entries") as bad:
        image_facts(None, "sm_90,ampere")
    assert bad.value.where == "ampere"


def test_the_spec_plan_for_cluster_probe_is_probe_runners() -> None:
    from imagekit.probe.runner import MOUNT, ProbePlan

    plan = ProbePlan(engine="sglang", probes=["pip_check", "find_spec", "cli_help"],
                     find_spec=["nixl"])
    assert plan.arguments() == [(p, plan.argv(p)[1:]) for p in plan.probes]
    assert plan.arguments() == [("pip_check", []), ("find_spec", ["nixl"]),
                                ("cli_help", ["sglang"])]
    assert plan.argv("pip_check") == [f"{MOUNT}/pip_check.py"]


class _Client:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def resolve_tag(self, repository: str, tag: str) -> Digest:
        self.asked.append((repository, tag))
        return D


def test_digest_of_a_pinned_reference_asks_nothing_and_a_tag_asks_the_registry() -> None:
    from imagekit.names import digest_of

    client = _Client()
    other = Digest.parse("sha256:" + "b" * 64)
    assert digest_of(client, ImageReference.parse(f"r.example/x@{other}")) == other  # type: ignore[arg-type]
    assert client.asked == []
    assert digest_of(client, ImageReference.parse("r.example/x")) == D  # type: ignore[arg-type]
    assert digest_of(client, ImageReference.parse("r.example/x:v1")) == D  # type: ignore[arg-type]
    assert client.asked == [("x", "latest"), ("x", "v1")]


def test_the_preemption_rule() -> None:
    from imagekit.cluster.precheck import PodIntent, non_preempting_of, preemption_policy

    assert preemption_policy(None) is None and preemption_policy("Never") == "Never"
    assert preemption_policy("PreemptLowerPriority") == "PreemptLowerPriority"
    with pytest.raises(InvalidInput, match="preemption policy must be Never or "
                                           "PreemptLowerPriority"):
        preemption_policy("never")
    assert non_preempting_of(False, "Never") and non_preempting_of(True, None)
    assert not non_preempting_of(False, "PreemptLowerPriority")
    pod = {"spec": {"preemptionPolicy": "Never", "containers": []}}
    assert PodIntent.from_pod(pod).non_preempting


def test_each_mode_refuses_the_options_it_would_ignore() -> None:
    """`cluster gpu-preflight`: each mode names the options it uses; one given on the command
    line that the mode would ignore is one line (the job's options without --nodes, the
    single Pod's with it)."""
    from typer.testing import CliRunner

    from imagekit.cli import app

    def refusal(*args: str) -> str:
        done = CliRunner().invoke(app, ["cluster", "gpu-preflight", "127.0.0.1:1/x:1", *args],
                                  prog_name="imagekit")
        assert done.exit_code == 2, done.output
        return done.output.strip()

    assert refusal("--gpus-per-node", "8", "--env", "A=1") == (
        "imagekit: error: --gpus-per-node, --env do nothing with one preflight Pod (without "
        "--nodes or --each-node): leave them out (cluster gpu-preflight)")
    assert refusal("--job-mode", "indexed-job").startswith("imagekit: error: --job-mode does")
    assert refusal("--nodes", "2", "--gpus-per-node", "8", "--storage-label", "a=b") == (
        "imagekit: error: --storage-label does nothing with --nodes N (one distributed job): "
        "leave it out (cluster gpu-preflight)")
