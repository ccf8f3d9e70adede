"""Distributions, not single readings, on the preflight: every timed check judged on repeated cycles, the verdicts of the
committed H200 stability samples recomputed from their files, the interval rules on synthetic
cycles drawn from those real samples, the ceiling table, and the bad-input lines."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path
from types import ModuleType

import pytest
import torch

from imagekit.gpu import PreflightRecord
from tests.gpu.conftest import preflight_argv

SAMPLES = Path(__file__).resolve().parents[2] / "gpu_checks" / "samples"
STAB = "2026-12-01-h200x1-stability"


def _records(call: str, name: str) -> list[dict]:
    out = []
    with tarfile.open(SAMPLES / f"{STAB}-{call}-{name}.tar.gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            if member.name.endswith(".json"):
                f = tar.extractfile(member)
                assert f is not None
                out.append(json.loads(f.read()))
    return out


def _theirs(preflight: ModuleType, call: str) -> dict:
    return preflight.parse_nccl_tests((SAMPLES / f"{STAB}-{call}-nccl-tests.txt").read_text())


@pytest.mark.parametrize("call,name,status,count", [
    ("a", "healthy", "PASS", 20), ("a", "nodelay", "PASS", 20),
    ("b", "healthy", "PASS", 8), ("b", "slowed", "FAIL", 20)])
def test_the_h200_stability_samples_give_one_verdict_every_time(
        preflight: ModuleType, call: str, name: str, status: str, count: int) -> None:
    """The committed back-to-back runs on one H200: small-message-time recomputed with this code
    from each record's cycles and that call's nccl-tests cycles. Healthy: PASS every time (40 of
    call a, 8 of call b); with the injected delay (2 x bound x nccl-tests' time per call): FAIL
    every time, on the whole interval. Call a ran the code before the two-sample rule, whose
    median-vs-lowest verdict failed 3 of its 20 healthy runs (its summary.txt)."""
    theirs = _theirs(preflight, call)
    records = _records(call, name)
    assert len(records) == count
    for record in records:
        PreflightRecord.model_validate(record)
        result, data = preflight.small_message_verdict(record["small_messages"]["sizes"],
                                                       theirs, "sample", record["world_size"])
        assert result["status"] == status, result["detail"]
        cycles = record["small_messages"]["sizes"][0]["nccl_cycles"]
        assert len(cycles) == 5 == record["matmul"]["repeats"]
        worst = max(data["per_ratio"], key=lambda p: p["statistic"])
        if status == "FAIL":
            assert worst["band"] == "FAIL" and worst["low"] > 2 * 1.5 * 0.9
            assert record["test_hooks"] == {"PREFLIGHT_TEST_DELAY_US": "19.47"}
        else:
            assert worst["band"] in ("PASS", "NOISE") and not record["test_hooks"]
        recorded = {c["name"]: c for c in record["checks"]}
        assert recorded["matmul-rate"]["status"] == "PASS"
        assert recorded["nvml-clock-events"]["status"] == "PASS"
        if call == "b":  # the code that ran is this one: its own verdict agrees
            assert recorded["small-message-time"]["status"] == status


def _real_cycles(preflight: ModuleType) -> tuple[list[float], list[float]]:
    """Our 1 KiB out-of-place eager cycles of one real healthy run, and nccl-tests' cycles."""
    record = _records("a", "healthy")[0]
    ours = [c["out_of_place"]["eager_us"]
            for c in record["small_messages"]["sizes"][0]["nccl_cycles"]]
    theirs = _theirs(preflight, "a")["eager"][1024]["out_of_place_us_cycles"]
    return ours, theirs


@pytest.mark.parametrize("factor,band", [(1.0, "PASS"), (3.0, "FAIL"), (1.45, "NOISE")])
def test_interval_rules_on_cycles_drawn_from_the_real_h200(preflight: ModuleType, factor: float,
                                                           band: str) -> None:
    """Clear pass (the real cycles), clear fail (them x3), straddling (x1.45: the median near
    the 1.5 bound, the interval across it): PASS / FAIL / PASS within noise."""
    ours, theirs = _real_cycles(preflight)
    judged = preflight.stats.judge_two(theirs, [x * factor for x in ours], 1.5, "lower")
    assert judged.band == band, judged.text
    assert judged.status == ("FAIL" if band == "FAIL" else "PASS")
    if band == "NOISE":
        assert judged.summary.low < 1.5 < judged.summary.high and "within noise" in judged.text


def test_matmul_ceiling_table_by_nvml_name(preflight: ModuleType) -> None:
    assert preflight.ceiling_for("NVIDIA H200")[0] == 790.0
    assert preflight.ceiling_for("nvidia  h100 80gb hbm3")[0] == pytest.approx(791.0)
    for name in ("NVIDIA H20", "NVIDIA A100-SXM4-80GB", "NVIDIA H100 PCIe"):
        assert preflight.ceiling_for(name) is not None, name
    assert preflight.ceiling_for("NVIDIA GeForce RTX 4090") is None


def _rate(preflight: ModuleType, names: list[str], tflops: list[list[float]],
          argv: list[str] | None = None) -> dict:
    run = preflight.Preflight(preflight.parse_args(argv or []))
    run.device = torch.device("cuda", 0)  # judged as on a GPU; nothing here touches CUDA
    ranks = [{"rank": i, "name": n} for i, n in enumerate(names)]
    mm = [{"rank": i, "tflops": sorted(c)[len(c) // 2], "tflops_cycles": c}
          for i, c in enumerate(tflops)]
    ceiling, source = run.matmul_ceiling(ranks)
    run.matmul_rate(mm, ceiling, source)
    return run.checks[-1]


def test_matmul_rate_is_judged_per_model_and_deferred_for_an_unknown_one(
        preflight: ModuleType) -> None:
    """Real H200 cycles (793, 775, 750, 683, 675) pass the 632 floor (0.8 x 790); a rank at
    half that fails naming it; a model not in the table is DEFERRED naming the model."""
    real = [793.0, 775.0, 750.0, 683.0, 675.0]
    ok = _rate(preflight, ["NVIDIA H200"] * 2, [real, real])
    assert ok["status"] == "PASS" and ok["data"]["floor_tflops"] == pytest.approx(632.0)
    slow = _rate(preflight, ["NVIDIA H200"] * 2, [real, [x / 2 for x in real]])
    assert slow["status"] == "FAIL" and "rank 1" in slow["detail"]
    straddle = _rate(preflight, ["NVIDIA H200"], [[x * 0.85 for x in real]])
    assert straddle["status"] == "PASS" and straddle["data"]["band"] == "NOISE"
    unknown = _rate(preflight, ["NVIDIA GeForce RTX 4090"], [real])
    assert unknown["status"] == "DEFERRED" and "RTX 4090" in unknown["detail"]
    given = _rate(preflight, ["NVIDIA GeForce RTX 4090"], [real], ["--tflops-ceiling", "800"])
    assert given["status"] == "PASS"
    few = _rate(preflight, ["NVIDIA H200"], [real[:3]])
    assert few["status"] == "DEFERRED" and "too few samples" in few["detail"]


@pytest.mark.parametrize("args,words", [
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--repeats", "-1"], "--repeats must be >= 1"),
    (["--repeats", "two"], "--repeats must be a whole number"),
    (["--confidence", "1"], "--confidence must be in (0, 1)"),
    (["--confidence", "0"], "--confidence must be in (0, 1)"),
    (["--confidence", "-0.5"], "--confidence must be in (0, 1)")])
def test_bad_repeats_and_confidence_are_one_line_exit_2(preflight: ModuleType, args: list[str],
                                                         words: str, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        preflight.parse_args(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("preflight: error: ") and words in err[0], err


def test_bad_repeats_from_the_command_line_writes_no_record(tmp_path: Path, mount: Path) -> None:
    done = subprocess.run([*preflight_argv(), "--repeats", "0", "--json",
                           str(tmp_path / "r.json")], capture_output=True, text=True,
                          timeout=120, cwd=mount)
    assert done.returncode == 2
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("preflight:")]
    assert lines == ["preflight: error: --repeats must be >= 1, not 0"], done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.json").exists()


def test_every_cycle_reaches_the_evidence(tmp_path: Path) -> None:
    """`imagekit gpu record` of a slowed H200 run: the attempt's typed result lists every timed
    item with all its cycles (ours and nccl-tests'), the FAIL on its interval among them."""
    from imagekit.evidence import EvidenceStore
    from imagekit.evidence.kinds import GpuPreflightResult
    from imagekit.gpu.evidence import record_preflight

    record = _records("b", "slowed")[0]
    path = tmp_path / "slowed.json"
    path.write_text(json.dumps(record))
    store = EvidenceStore(tmp_path / "ev")
    done = record_preflight(path, store, name="h200")
    assert done.status == "FAIL"
    [attempt] = store.attempts("h200", "gpu-preflight")
    result = GpuPreflightResult.model_validate(attempt.result)
    items = {(t.check, t.item): t for t in result.timed}
    small = items[("small-message-time", "ratio out_of_place_eager")]
    assert small.band == "FAIL" and small.low is not None and small.low > 1.5
    assert len(small.samples) == 5 and len(small.baseline_samples) == 5
    assert items[("matmul-rate", "rank 0")].band == "PASS"
    assert len(items[("nvml-clock-events", "rank 0")].samples) == 5


def test_the_report_shows_every_timed_check_with_its_repeats_and_spread(tmp_path: Path) -> None:
    """A release engineer sees why a FAIL is a FAIL: markdown and HTML list each timed item's
    verdict, median, interval, bound, repeats and every cycle (ours and nccl-tests')."""
    from imagekit.evidence import EvidenceStore
    from imagekit.gpu.evidence import record_preflight
    from imagekit.oci import Digest
    from imagekit.report.collect import build_report
    from imagekit.report.render import render

    digest = Digest.parse("sha256:" + "7" * 64)
    path = tmp_path / "slowed.json"
    path.write_text(json.dumps(_records("b", "slowed")[0]))
    store = EvidenceStore(tmp_path / "ev")
    record_preflight(path, store, digest=digest)
    report = build_report(store, digest)
    [pre] = report.preflight
    assert {(t.check, t.band) for t in pre.timed} >= {("small-message-time", "FAIL"),
                                                     ("matmul-rate", "PASS")}
    md = render(report, "md")
    assert "| check | item | verdict | median | interval | bound | repeats | every cycle |" in md
    row = next(line for line in md.splitlines()
               if line.startswith("| small-message-time | ratio out_of_place_eager | FAIL |"))
    assert "| 5 |" in row and "(vs " in row
    html = render(report, "html")
    assert "<th>every cycle</th>" in html and "ratio out_of_place_eager" in html
