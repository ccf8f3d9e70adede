"""The fleet preflight's pure parts: the Pod command, the record read back from a Pod log,
which nodes may be marked, the node x check table; precheck's image fit from node labels."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from imagekit.cluster.precheck import PodIntent, precheck
from imagekit.gpu.fleet import (
    RECORD_MARK,
    FleetReport,
    NodeRow,
    nodes_to_mark,
    parse_pod_log,
    pod_command,
)
from imagekit.results import CheckResult, Status

SAMPLE = Path(__file__).resolve().parents[2] / "gpu_checks" / "samples" / \
    "2026-12-01-h200x1.json"


def test_pod_command_runs_the_launcher_and_prints_the_record_after_a_marker() -> None:
    argv = pod_command(8, ["-m", "preflight"], ["--expect-model", "H200", "--max-bytes=1G"])
    assert argv[:2] == ["sh", "-c"]
    script = argv[2]
    assert "--nproc-per-node=8 -m preflight --json /tmp/preflight.json " \
           "--expect-model H200 --max-bytes=1G" in script
    assert f"echo {RECORD_MARK}; cat /tmp/preflight.json; exit $rc" in script
    plain = pod_command(2, ["/imagekit/check.py"], [])[2]
    assert "--nproc-per-node=2 /imagekit/check.py --json" in plain
    hostile = pod_command(1, ["-m", "preflight"], ["$(reboot)"])[2]
    assert shlex.quote("$(reboot)") in hostile


def test_record_is_read_back_from_the_pod_log() -> None:
    text = SAMPLE.read_text()
    record, why = parse_pod_log(f"GPU preflight: PASS …table…\n{RECORD_MARK}\n{text}")
    assert record is not None and record.status is Status.PASS and why == ""
    assert parse_pod_log("Traceback: ImportError torch")[0] is None
    broken = json.loads(text)
    broken["status"] = "FAIL"  # disagrees with its checks: not a valid record
    none, why = parse_pod_log(f"{RECORD_MARK}\n{json.dumps(broken)}")
    assert none is None and "no valid preflight record" in why


def _row(node: str, status: Status, stage: str) -> NodeRow:
    return NodeRow(node=node, status=status, stage=stage, detail="",
                   checks=[CheckResult(name="nvml-ecc", status=status)])


def test_only_nodes_whose_preflight_failed_are_marked() -> None:
    rows = [_row("bad-gpu", Status.FAIL, "preflight"),
            _row("healthy", Status.PASS, "preflight"),
            _row("busy", Status.FAIL, "precheck"),          # no free GPU: not the node's fault
            _row("never-ran", Status.ERROR, "pod"),         # image pull failed
            _row("no-nvml", Status.DEFERRED, "preflight")]  # could not judge
    assert nodes_to_mark(rows) == ["bad-gpu"]


def test_table_cells() -> None:
    rows = [_row("a", Status.PASS, "preflight"), _row("b", Status.FAIL, "precheck")]
    report = FleetReport(subject="s", digest="sha256:" + "0" * 64, status=Status.FAIL,
                         selector={}, nodes=rows, check_names=["nvml-ecc", "nvml-pcie"],
                         marked={}, evidence=[])
    assert report.cell(rows[0], "nvml-ecc") == "PASS" and report.cell(rows[0], "nvml-pcie") == "-"


class FakeKube:
    """Reads only: the three lists precheck makes."""

    def __init__(self, nodes: list[dict]) -> None:
        self.nodes = nodes

    def list(self, path: str, **query: str) -> list[dict]:
        return self.nodes if path == "/api/v1/nodes" else []

    def maybe_get(self, path: str) -> None:
        return None


def _node(name: str, labels: dict[str, str]) -> dict:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": "8"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


H100_DRIVER_124 = {"nvidia.com/cuda.driver.major": "12", "nvidia.com/cuda.driver.minor": "4",
                   "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0"}


def test_precheck_judges_the_image_against_the_nodes_gfd_labels() -> None:
    kube = FakeKube([_node("gpu-1", H100_DRIVER_124)])
    base = PodIntent(node_name="gpu-1", gpus=8)
    fits = {c.name: c for c in precheck(kube, base.model_copy(update={  # type: ignore[arg-type]
        "image_cuda": "12.4", "image_arch": ["sm_80", "sm_90"]}))}
    assert fits["fit_cuda"].status is Status.PASS and fits["fit_arch"].status is Status.PASS
    cuda13 = {c.name: c for c in precheck(kube, base.model_copy(update={  # type: ignore
        "image_cuda": "13.0", "image_arch": ["sm_90"]}))}
    assert cuda13["fit_cuda"].status is Status.FAIL and "up to 12.4" in cuda13["fit_cuda"].detail
    ampere = {c.name: c for c in precheck(kube, base.model_copy(update={  # type: ignore
        "image_cuda": "12.4", "image_arch": ["sm_80"]}))}
    assert ampere["fit_arch"].status is Status.FAIL and "sm_90" in ampere["fit_arch"].detail
    # without image facts nothing is judged (older callers see no new findings)
    assert not {"fit_cuda", "fit_arch"} & {c.name for c in precheck(kube, base)}  # type: ignore


def test_precheck_reads_the_image_facts_from_pod_annotations() -> None:
    pod = {"metadata": {"namespace": "x", "annotations": {
        "imagekit.dev/image-cuda": "13.0", "imagekit.dev/image-arch-list": "sm_90, sm_100"}},
        "spec": {"nodeName": "gpu-1", "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": 8}}}]}}
    intent = PodIntent.from_pod(pod)
    assert intent.image_cuda == "13.0" and intent.image_arch == ["sm_90", "sm_100"]
    found = {c.name: c for c in precheck(FakeKube([_node("gpu-1", H100_DRIVER_124)]),
                                          intent)}  # type: ignore[arg-type]
    assert found["fit_cuda"].status is Status.FAIL
    unlabeled = {c.name: c for c in precheck(FakeKube([_node("gpu-1", {})]),
                                              intent)}  # type: ignore[arg-type]
    assert unlabeled["fit_cuda"].status is Status.DEFERRED


def test_precheck_cli_refuses_malformed_image_facts() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "precheck", "--node",
                           "x", "--image-arch", "ampere"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("imagekit: error: --image-arch entries")


def test_the_cli_prints_a_node_by_check_table(monkeypatch, tmp_path, capsys) -> None:
    import pytest

    import imagekit.cluster.kube as kube_module
    import imagekit.gpu.fleet as fleet
    from imagekit.cli.gpujob import each_node_preflight
    from imagekit.oci import ImageReference

    rows = [NodeRow(node="gpu-a", status=Status.PASS, stage="preflight", detail="ok",
                    checks=[CheckResult(name="nvml-ecc", status=Status.PASS)]),
            NodeRow(node="gpu-b", status=Status.FAIL, stage="preflight", detail="pending remap",
                    checks=[CheckResult(name="nvml-ecc", status=Status.FAIL)],
                    marked=["cordoned"])]
    report = FleetReport(subject="s", digest="sha256:" + "1" * 64, status=Status.FAIL,
                         selector={}, nodes=rows, check_names=["nvml-ecc"],
                         marked={"gpu-b": ["cordoned"]}, evidence=[])

    class NoKube:
        def __init__(self, *a: object) -> None: ...
        def __enter__(self) -> NoKube: return self
        def __exit__(self, *a: object) -> None: ...

    monkeypatch.setattr(kube_module, "Kube", NoKube)
    monkeypatch.setattr(fleet, "run_fleet", lambda *a, **k: report)
    script = tmp_path / "preflight.py"
    script.write_text("")
    import typer
    with pytest.raises(typer.Exit) as exited:
        each_node_preflight(ImageReference.parse("r.example/x@sha256:" + "1" * 64),
                            namespace="n", selector={}, tolerations=[], gpus=8, script=script,
                            script_args=[], timeout=1, cordon=True, taint=False,
                            docker_config=None, kubeconfig=tmp_path / "k",
                            evidence_dir=tmp_path, json_output=False)
    assert exited.value.exit_code == 1
    out = capsys.readouterr().out
    assert "GPU preflight on each node: FAIL" in out and "gpu-b" in out and "cordoned" in out


def test_baselines_shipped_to_each_node_are_the_multi_gpu_pass_samples() -> None:
    from imagekit.gpu.fleet import baseline_files

    found = baseline_files(SAMPLE.parent)
    assert "2026-11-29-h200x2.json" in found and "2026-11-29-h200x4.json" in found
    assert "2026-12-01-h200x1.json" not in found            # one GPU: no bandwidth verdict
    assert "2026-11-29-h200x2-faults.json" not in found     # made with fault hooks
    assert sum(len(v) for v in found.values()) < 900_000    # a ConfigMap holds 1 MiB
