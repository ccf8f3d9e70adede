"""`cluster gpu-preflight --nodes`: the preflight as a distributed job on the real local cluster
(v1.20: one Job per index, rendezvous through a ClusterIP Service), 2 Pods on gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.evidence import EvidenceStore
from imagekit.gpu import PreflightRecord, busbw_factor

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600),
              pytest.mark.usefixtures("as_operator")]

REPO = Path(__file__).resolve().parents[2]
SMALL_16K = ["--backend", "gloo", "--max-bytes", "16K", "--check-bytes", "64K", "--matmul-n", "64"]
SMALL_4K = ["--backend", "gloo", "--max-bytes", "4K", "--check-bytes", "16K", "--matmul-n", "32"]


def _cli(*args: str, timeout: int = 480) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=dict(os.environ))


def test_two_pods_one_world_through_the_job_controller(kube, test_ns, torch_image, tmp_path,
                                                       checkov):
    from imagekit.cluster import podsecurity

    from .operator import PodsSeen

    evidence = tmp_path / "evidence"
    with PodsSeen(kube, test_ns) as seen:
        done = _cli("cluster", "gpu-preflight", str(torch_image.reference), "--nodes", "1",
                    "--pods-per-node", "2", "--gpus-per-node", "0", "--namespace", test_ns,
                    "--selector", "nvidia.com/gpu.present=true",
                    "--script", "gpu_checks/preflight/__main__.py",  # the package
                    *[f"--preflight-arg={a}" for a in SMALL_16K],
                    "--pod-timeout", "300", "--submit", "--json", "--evidence-dir",
                    str(evidence))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    # the Job's Pods, as the API server stored them: restricted, run as the non-root user
    job_pods = [p for p in seen.pods.values() if "imagekit.dev/gpujob" in p["metadata"].get(
        "labels", {})]
    assert len(job_pods) == 2
    for pod in job_pods:
        assert podsecurity.violations(pod, "restricted") == [], pod["metadata"]["name"]
    from .pss import assert_both_admit  # and checkov, the independent checker, agrees

    assert_both_admit(checkov, {p["metadata"]["name"]: p for p in job_pods},
                      tmp_path / "judged")
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["digest"] == str(torch_image.digest)
    assert "job_shape" not in checks     # the shape is the record's description, below
    pods = checks["job_pods"]["data"]["pods"]
    assert len(pods) == 2 and all(p["phase"] == "Succeeded" for p in pods.values())
    ips = sorted(p["ip"] for p in pods.values())
    assert len(set(ips)) == 2 and all(ip.startswith("10.244.0.") for ip in ips)
    assert sorted(checks["job_pods"]["data"]["endpoints"]) == ips   # headless Service
    assert checks["job_pods"]["data"]["rendezvous"].startswith("10.")
    for name in ("preflight_record", "world", "allreduce_every_rank", "busbw_formula",
                 "cleanup"):
        assert checks[name]["status"] == "PASS", checks[name]
    assert checks["busbw_formula"]["data"]["factor"] == busbw_factor(2) == 1.0
    for row in checks["busbw_formula"]["data"]["rows"]:
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"])

    # evidence under the image digest: the job's attempt and the record's
    store = EvidenceStore(evidence)
    job = store.latest(torch_image.digest, "gpu-job")
    recorded = store.latest(torch_image.digest, "gpu-preflight")
    assert job is not None and recorded is not None
    job_dir = store.path_of(job)
    result = store.result(job)
    assert result is not None and result.mode == "job-per-index" and result.world_size == 2
    assert not result.indexed_jobs and result.server.startswith("v1.20")
    assert result.ranks_per_pod == 1 and "Indexed Jobs not supported" in result.shape
    assert result.record_found and sorted(result.pod_ips.values()) == ips
    logs = sorted((job_dir / "logs").iterdir())
    assert len(logs) == 2
    record = PreflightRecord.model_validate_json((store.path_of(recorded) /
                                                  "preflight.json").read_text())
    assert record.world_size == 2 and [r.rank for r in record.ranks] == [0, 1]
    assert len({r.hostname for r in record.ranks}) == 2     # two Pods, not one
    assert all(r.first_bad_index == -1 for c in record.allreduce_correctness
               for r in c.per_rank)
    manifests = json.loads((job_dir / "manifests.json").read_text())
    kinds = [m["kind"] for m in manifests]
    assert kinds.count("Job") == 2 and kinds.count("Service") == 2
    assert all("completionMode" not in m["spec"] for m in manifests if m["kind"] == "Job")
    # nothing left behind
    left = kube.list(f"/api/v1/namespaces/{test_ns}/pods",
                     labelSelector="imagekit.dev/role=gpu-job")
    assert left == []
    assert kube.list(f"/apis/batch/v1/namespaces/{test_ns}/jobs",
                     labelSelector="imagekit.dev/role=gpu-job") == []


def test_a_failing_rank_fails_the_job(kube, test_ns, torch_image, tmp_path):
    """A wrong contribution on rank 1 (the script's own fault hook, passed with --env to every
    Pod): FAIL naming rank 1, exit 1, cleaned up."""
    done = _cli("cluster", "gpu-preflight", str(torch_image.reference), "--nodes", "1",
                "--pods-per-node", "2", "--gpus-per-node", "0", "--namespace", test_ns,
                "--selector", "nvidia.com/gpu.present=true",
                "--env", "PREFLIGHT_TEST_WRONG_RANK=1",  # no --script: the package by default
                *[f"--preflight-arg={a}" for a in SMALL_4K],
                "--pod-timeout", "300", "--submit", "--json",
                "--evidence-dir", str(tmp_path / "evidence"))
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["preflight_record"]["status"] == "FAIL"
    assert checks["allreduce-correctness"]["data"]["wrong_contributors"] == [1]
    assert checks["cleanup"]["status"] == "PASS"
    assert kube.list(f"/api/v1/namespaces/{test_ns}/pods",
                     labelSelector="imagekit.dev/role=gpu-job") == []


def test_forcing_indexed_jobs_on_a_server_without_them_is_refused(test_ns, torch_image):
    done = _cli("cluster", "gpu-preflight", str(torch_image.pinned), "--nodes", "2",
                "--gpus-per-node", "0", "--namespace", test_ns, "--selector",
                "nvidia.com/gpu.present=true", "--job-mode", "indexed-job", "--submit",
                timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "indexed-job needs Indexed Jobs and cluster DNS" in done.stderr
    assert "completionMode dropped" in done.stderr


def test_more_nodes_than_the_cluster_has_is_a_finding(kube, test_ns, torch_image):
    """--nodes 2 with one Pod per node on a one-node cluster: found before anything exists."""
    done = _cli("cluster", "gpu-preflight", str(torch_image.pinned), "--nodes", "2",
                "--gpus-per-node", "0", "--namespace", test_ns, "--selector",
                "nvidia.com/gpu.present=true", "--submit", "--json", timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert checks["node_count"]["status"] == "FAIL"
    assert "asked for 2 node(s) x 1 Pod(s); 1 node(s) match" in checks["node_count"]["detail"]
    assert checks["submission"]["status"] == "FAIL"
    assert kube.list(f"/apis/batch/v1/namespaces/{test_ns}/jobs",
                     labelSelector="imagekit.dev/role=gpu-job") == []
