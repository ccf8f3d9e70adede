"""The grammars and answers the cluster commands share, each written once:
tolerations, `--probe` choices, image facts (imagekit.inputs), tag -> digest
(imagekit.names.digest_of), the preemption rule (imagekit.cluster.precheck), the job options
refused without `--nodes` (imagekit.cli.gpujob)."""

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


def test_job_options_are_refused_without_nodes() -> None:
    from imagekit.cli.gpujob import refuse_job_options

    refuse_job_options(gpus_per_node=None, pod_env=None, pods_per_node=1, job_mode="auto")
    with pytest.raises(InvalidInput, match="^--gpus-per-node, --env only with --nodes$"):
        refuse_job_options(gpus_per_node=8, pod_env=["A=1"], pods_per_node=1,
                           job_mode="auto")
    with pytest.raises(InvalidInput, match="--pods-per-node/--job-mode only with --nodes"):
        refuse_job_options(gpus_per_node=None, pod_env=None, pods_per_node=1,
                           job_mode="indexed-job")
