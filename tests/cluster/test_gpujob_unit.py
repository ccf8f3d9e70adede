"""The many-Pod preflight's pure parts: both job shapes rendered, the record's job-level checks
(each with the record that makes it FAIL), the JSON record taken back out of a Pod log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.cluster.gpujob import (
    INDEX_ANNOTATION,
    JSON_BEGIN,
    JSON_END,
    MODE_INDEXED,
    MODE_PER_INDEX,
    RUN_SH,
    GpuJobOptions,
    ServerShape,
    extract_record,
    render,
)
from imagekit.errors import InvalidInput
from imagekit.gpu import PreflightRecord
from imagekit.gpu.job import record_checks
from imagekit.oci import ImageReference
from imagekit.results import Status

REPO = Path(__file__).resolve().parents[2]
PINNED = ImageReference.parse("127.0.0.1:5003/imagekit/torch@sha256:" + "ab" * 32)


def _options(**kw) -> GpuJobOptions:
    base = dict(nodes=2, gpus_per_node=8, namespace="ns",
                node_selector={"nvidia.com/gpu.present": "true"},
                script=REPO / "gpu_checks" / "preflight")
    base.update(kw)
    return GpuJobOptions(**base)


def test_indexed_job_shape() -> None:
    r = render(PINNED, _options(), "gj", MODE_INDEXED)
    assert [s["spec"].get("clusterIP") for s in r.services] == ["None"]
    (job,) = r.jobs
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2 and spec["backoffLimit"] == 0
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == "gj" and "hostname" not in pod
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["RDZV_ENDPOINT"]["value"] == "gj-0.gj.ns.svc:29400" == r.rdzv_endpoint
    assert env["IMAGEKIT_INDEX"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        f"metadata.annotations['{INDEX_ANNOTATION}']"
    assert env["NNODES"]["value"] == "2" and env["NPROC_PER_NODE"]["value"] == "8"
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert pod["containers"][0]["image"] == str(PINNED.name) + "@" + str(PINNED.digest)
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"


def test_job_per_index_shape_on_one_node() -> None:
    options = _options(nodes=1, gpus_per_node=0, pods_per_node=2)
    r = render(PINNED, options, "gj", MODE_PER_INDEX, rdzv_ip="10.96.0.7")
    headless, rdzv = r.services
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["selector"] == {"imagekit.dev/gpujob": "gj"}
    assert rdzv["spec"]["selector"]["imagekit.dev/gpujob-index"] == "0"
    assert [j["metadata"]["name"] for j in r.jobs] == ["gj-0", "gj-1"]
    for index, job in enumerate(r.jobs):
        assert "completionMode" not in job["spec"] and job["spec"]["completions"] == 1
        pod = job["spec"]["template"]["spec"]
        assert pod["hostname"] == f"gj-{index}"
        env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert env["IMAGEKIT_INDEX"] == str(index)
        assert env["RDZV_ENDPOINT"] == "10.96.0.7:29400" and env["NNODES"] == "2"
        assert env["NPROC_PER_NODE"] == "1" and env["NVIDIA_VISIBLE_DEVICES"] == "void"
        assert "resources" not in pod["containers"][0]
        assert pod["topologySpreadConstraints"][0]["maxSkew"] == 1
    assert r.configmap["data"]["run-gpujob.sh"].count(" -m preflight --json") == 1
    # the package, laid out by the volume's items as preflight/<module>.py beside the runner
    volume = r.jobs[0]["spec"]["template"]["spec"]["volumes"][0]["configMap"]
    paths = {i["key"]: i["path"] for i in volume["items"]}
    assert paths["preflight.__main__.py"] == "preflight/__main__.py"
    assert paths["run-gpujob.sh"] == "run-gpujob.sh" and set(paths) == set(r.configmap["data"])


def test_server_shape_picks_the_mode() -> None:
    assert ServerShape("v1.20.2", False, False, "").mode == MODE_PER_INDEX
    assert ServerShape("v1.29.0", True, False, "").mode == MODE_PER_INDEX   # no DNS names
    assert ServerShape("v1.29.0", True, True, "").mode == MODE_INDEXED


@pytest.mark.parametrize("kw, where", [({"nodes": 0}, "0"), ({"pods_per_node": 3}, "8/3"),
                                       ({"gpus_per_node": -1}, "-1"), ({"mode": "x"}, "x")])
def test_bad_options_are_refused(kw, where) -> None:
    with pytest.raises(InvalidInput) as exc:
        _options(**kw).validate()
    assert exc.value.where == where


def test_run_script_hosts_the_store_on_index_0(tmp_path: Path) -> None:
    """run-gpujob.sh with a fake python3: index 0 hosts, others join; the record comes back."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho \"ARGS $*\"\n"
                                  "echo '{\"x\": 1}' > /tmp/preflight.json\n")
    (fake / "python3").chmod(0o755)
    script = tmp_path / "run.sh"
    script.write_text(RUN_SH.replace("{script}", "preflight.py"))
    outs = {}
    for index in ("0", "1"):
        env = {"PATH": f"{fake}:/usr/bin:/bin", "IMAGEKIT_INDEX": index, "NNODES": "2",
               "NPROC_PER_NODE": "1", "RDZV_ENDPOINT": "10.96.0.7:29400", "RDZV_ID": "gj",
               "RDZV_TIMEOUT": "300", "POD_IP": f"10.244.0.{index}"}
        done = subprocess.run(["sh", str(script), "--backend", "gloo"], env=env,
                              capture_output=True, text=True, check=True)
        outs[index] = done.stdout
    assert "is_host=true," in outs["0"] and "is_host=false," in outs["1"]
    assert "--local-addr=10.244.0.1" in outs["1"] and outs["1"].rstrip().endswith(JSON_END)
    assert "--backend gloo" in outs["0"]
    assert extract_record(outs["0"]) == b'{"x": 1}'
    assert extract_record("no marker here") is None
    assert JSON_BEGIN in outs["0"]


def _record(tmp_path_factory) -> dict:
    """A real two-rank record from the preflight script on gloo (host side)."""
    out = tmp_path_factory.mktemp("rec") / "r.json"
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc-per-node=2", "-m", "preflight",
                    "--json", str(out), "--backend", "gloo", "--max-bytes", "4K",
                    "--check-bytes", "16K", "--matmul-n", "32"],
                   capture_output=True, text=True, timeout=240, check=False,
                   cwd=REPO / "gpu_checks",  # the package, run as from its mount
                   env={"PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                        "PYTHONWARNINGS": "ignore"})
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def two_rank_record(tmp_path_factory) -> dict:
    return _record(tmp_path_factory)


def _checks(raw: dict, world: int) -> dict:
    return {c.name: c for c in record_checks(PreflightRecord.model_validate(raw), world)}


def test_record_checks_pass_on_a_real_two_rank_record(two_rank_record) -> None:
    checks = _checks(two_rank_record, 2)
    assert all(c.status is Status.PASS for c in checks.values()), checks
    assert checks["busbw_formula"].data["factor"] == 1.0


def test_record_checks_fail_a_smaller_world(two_rank_record) -> None:
    checks = _checks(two_rank_record, 4)
    assert checks["world"].status is Status.FAIL
    assert "asked for a world of 4" in checks["world"].detail
    assert checks["busbw_formula"].status is Status.FAIL


def test_record_checks_fail_a_bad_rank(two_rank_record) -> None:
    raw = json.loads(json.dumps(two_rank_record))
    raw["allreduce_correctness"][0]["per_rank"][1].update(first_bad_index=3, bad_elements=1)
    checks = _checks(raw, 2)
    assert checks["allreduce_every_rank"].status is Status.FAIL
    assert ", 1)" in checks["allreduce_every_rank"].detail


def test_record_checks_fail_a_wrong_busbw(two_rank_record) -> None:
    """The record model refuses such a file already; the job check stands on its own too."""
    record = PreflightRecord.model_validate(two_rank_record)
    bw = record.bandwidth
    rows = [bw.sizes[0].model_copy(update={"busbw_GBps": bw.sizes[0].algbw_GBps * 2}),
            *bw.sizes[1:]]
    broken = record.model_copy(update={"bandwidth": bw.model_copy(update={"sizes": rows})})
    checks = {c.name: c for c in record_checks(broken, 2)}
    assert checks["busbw_formula"].status is Status.FAIL
    assert str(bw.sizes[0].bytes) in checks["busbw_formula"].detail


@pytest.mark.parametrize("nodes_found, verdict", [(2, Status.DEFERRED), (1, Status.FAIL)])
def test_the_job_shape_is_the_records_description_not_a_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nodes_found: int,
        verdict: Status) -> None:
    """A dry run (no --submit): the verdict comes from what was checked (the precheck, the
    node count, nothing submitted: DEFERRED; a missing node: FAIL), never from a line that
    describes the job; the shape and why that mode are in the `gpu-job` record."""
    from imagekit.cluster import gpujob
    from imagekit.evidence import EvidenceStore
    from imagekit.results import CheckResult, overall

    shape = ServerShape("v1.20.2", False, True, "server v1.20.2: Indexed Jobs not supported "
                                                 "(completionMode dropped); cluster DNS absent")
    monkeypatch.setattr(gpujob.admit, "prepare", lambda kube, what, ns: "restricted")
    monkeypatch.setattr(gpujob.podsecurity, "require", lambda jobs, enforce, ns: None)
    monkeypatch.setattr(gpujob, "server_shape", lambda kube, ns: shape)
    monkeypatch.setattr(gpujob, "precheck", lambda kube, intent: [
        CheckResult(name="node_taints", status=Status.PASS, detail="tolerated")])
    monkeypatch.setattr(gpujob, "node_count", lambda kube, options: CheckResult(
        name="node_count", status=Status.PASS if nodes_found >= 2 else Status.FAIL,
        detail=f"{nodes_found} node(s) match the selector"))
    store = EvidenceStore(tmp_path)
    run = gpujob.run_gpu_job(None, PINNED, _options(), store,  # type: ignore[arg-type]
                             submit=False)
    assert [c.name for c in run.checks] == ["node_taints", "node_count", "submission"]
    assert overall(run.checks) is verdict
    record = store.latest(PINNED.digest, "gpu-job")
    assert record is not None and [c.name for c in record.checks] == \
        ["node_taints", "node_count", "submission"]
    result = store.result(record)
    assert result is not None and result.mode == MODE_PER_INDEX
    assert result.shape == shape.detail and result.ranks_per_pod == 8
    assert result.world_size == 16 and not result.submitted
