"""launch.sh and `imagekit serve-command` agree; the startup-log parser and the startupProbe
budget reproduce the record's numbers (pure, no cluster)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.errors import InvalidInput
from imagekit.launch import (
    ServeConfig,
    parse_startup_log,
    required_startup_seconds,
    serve_argv,
    startup_budget_check,
)
from imagekit.launch.budget import ProbeBudget
from imagekit.results import Status

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/
LAUNCH = ASSETS / "manifests" / "launch.sh"


def launch_sh(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(LAUNCH), *args], capture_output=True, text=True,
                          env={"PATH": os.environ["PATH"], **env}, timeout=30)


@pytest.mark.parametrize("env", [
    {},
    {"ENGINE": "sglang", "DISABLE_PIECEWISE_CUDA_GRAPH": "1", "MAX_CONTEXT": "8192",
     "MAX_REQUESTS": "4"},
    {"ENGINE": "sglang", "DISABLE_PIECEWISE_CUDA_GRAPH": "0", "TP": "2",
     "MODEL_PATH": "/models/MiniMax-M3", "SERVED_MODEL_NAME": "m3"},
    {"ENGINE": "vllm", "MAX_CONTEXT": "32768", "TP": "8", "PORT": "8001"},
    {"ENGINE": "vllm", "DISABLE_PIECEWISE_CUDA_GRAPH": "0"},
    # the spelling an image's own parser chose (serve_args), passed by cluster accept
    {"ENGINE": "sglang", "PREFILL_SWITCH": "--disable-piecewise-cuda-graph"},
    {"ENGINE": "sglang", "PREFILL_SWITCH": "--disable-piecewise-cuda-graph",
     "DISABLE_PIECEWISE_CUDA_GRAPH": "0"},
])
def test_launch_sh_and_serve_command_agree(env: dict[str, str]) -> None:
    result = launch_sh(env, "--log-level", "info")
    assert result.returncode == 0, result.stderr
    from_script = shlex.split(result.stdout)
    from_python = serve_argv(ServeConfig.from_env(env, extra_args=("--log-level", "info")))
    assert from_script == from_python


def test_record_launch_line_uses_current_prefill_flag() -> None:
    env = {"ENGINE": "sglang", "DISABLE_PIECEWISE_CUDA_GRAPH": "1", "MAX_CONTEXT": "8192",
           "MAX_REQUESTS": "4"}
    argv = shlex.split(launch_sh(env).stdout)
    assert "--cuda-graph-backend-prefill=disabled" in argv
    assert "--disable-piecewise-cuda-graph" not in argv
    assert argv[argv.index("--context-length") + 1] == "8192"
    assert argv[argv.index("--max-running-requests") + 1] == "4"
    off = shlex.split(launch_sh({**env, "DISABLE_PIECEWISE_CUDA_GRAPH": "0"}).stdout)
    assert not any("cuda-graph-backend-prefill" in a for a in off)


@pytest.mark.parametrize("env, message", [
    ({"ENGINE": "tgi"}, "ENGINE must be sglang or vllm"),
    ({"TP": "0"}, "TP must be a positive integer"),
    ({"MAX_CONTEXT": "32k"}, "MAX_CONTEXT must be a positive integer"),
    ({"MODEL_PATH": "models/m"}, "MODEL_PATH must be an absolute path"),
    ({"DISABLE_PIECEWISE_CUDA_GRAPH": "yes"}, "DISABLE_PIECEWISE_CUDA_GRAPH must be 0 or 1"),
    ({"PREFILL_SWITCH": "--a b"}, "PREFILL_SWITCH must be one --argument"),
])
def test_bad_settings_refused_by_both(env: dict[str, str], message: str) -> None:
    result = launch_sh(env)
    assert result.returncode == 2 and message in result.stderr and not result.stdout
    with pytest.raises(InvalidInput):
        ServeConfig.from_env(env)


def test_execute_runs_the_command(tmp_path: Path) -> None:
    fake = tmp_path / "python3"
    fake.write_text("#!/bin/sh\necho \"ran: $*\" > \"$OUT\"\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    result = subprocess.run(["bash", str(LAUNCH)], capture_output=True, text=True, timeout=30,
                            env={"PATH": f"{tmp_path}:/usr/bin:/bin", "EXECUTE": "1",
                                 "OUT": str(out)})
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith("ran: -m sglang.launch_server --model-path /models/model")


def test_serve_command_cli_json(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "imagekit", "serve-command", "--json"], capture_output=True,
        text=True, timeout=60, env={"PATH": os.environ["PATH"], "ENGINE": "vllm", "TP": "4",
                                    "IMAGEKIT_EVIDENCE_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["argv"][:3] == ["vllm", "serve", "/models/model"]
    assert doc["argv"][doc["argv"].index("--tensor-parallel-size") + 1] == "4"


# ---- startup log: realistic SGLang lines (formats as SGLang prints them) ---------------------
MOE_PATH = ("/sgl-workspace/sglang/python/sglang/srt/layers/moe/fused_moe_triton/configs/"
            "triton_3_4_0/E=129,N=384,device_name=NVIDIA_H20-3e.json")


def record_first_start() -> str:
    """The record's first start: 8 ranks, 1,481.53–1,481.82 s load, ~84.7 s decode graphs for
    bs 4/2/1, then piecewise graphs over 42 buckets (4…2,048) that never finished."""
    lines = []
    for rank in range(8):
        lines.append(f"[2026-05-12 08:01:0{rank} TP{rank}] Load weight begin. avail mem=94.41 GB")
    lines.append("[2026-05-12 08:01:05 TP0] Using model weights format ['*.safetensors']")
    lines.append("Loading safetensors checkpoint shards:  50% Completed | 59/118 "
                 "[12:20<12:21, 12.57s/it]")
    for rank in range(8):
        elapsed = 1481.53 + rank * (0.29 / 7)
        lines.append(f"[2026-05-12 08:25:4{rank} TP{rank}] Load weight end. elapsed={elapsed:.2f}"
                     f" s, type=MiniMaxM3ForConditionalGeneration, dtype=torch.bfloat16, "
                     f"avail mem=36.12 GB, mem usage=58.29 GB.")
    lines.append(f"[2026-05-12 08:25:50 TP0] Using default MoE kernel config. Performance might "
                 f"be sub-optimal! Config file not found at {MOE_PATH}, you can create them with "
                 f"https://github.com/sgl-project/sglang/tree/main/benchmark/kernels/fused_moe_triton")
    lines.append("[2026-05-12 08:25:52 TP0] Capture cuda graph begin. This can take up to several "
                 "minutes. avail mem=20.31 GB")
    lines.append("[2026-05-12 08:25:52 TP0] Capture cuda graph bs [1, 2, 4]")
    lines.append("Capturing batches (bs=4 avail_mem=20.30 GB):   0%|          | 0/3 "
                 "[00:00<?, ?it/s]\rCapturing batches (bs=1 avail_mem=20.11 GB): "
                 "100%|██████████| 3/3 [01:24<00:00, 28.21s/it]")
    for rank in range(8):
        lines.append(f"[2026-05-12 08:27:17 TP{rank}] Capture cuda graph end. Time elapsed: "
                     f"{84.66 + rank * 0.01:.2f} s. mem usage=0.41 GB. avail mem=19.90 GB.")
    buckets = list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32)) + \
        list(range(576, 1025, 64)) + list(range(1280, 2049, 256))
    assert len(buckets) == 42 and buckets[0] == 4 and buckets[-1] == 2048
    lines.append("[2026-05-12 08:27:17 TP0] Capture piecewise CUDA graph begin. avail mem=19.90 GB")
    lines.append(f"[2026-05-12 08:27:17 TP0] Capture cuda graph num tokens {buckets}")
    lines.append("Compiling num tokens (num_tokens=2048):   2%|▏         | 1/42 "
                 "[00:31<21:41, 31.74s/it]")
    return "\n".join(lines) + "\n"


def test_parser_reads_the_record_first_start() -> None:
    report = parse_startup_log(record_first_start())
    assert [r.rank for r in report.weight_load] == list(range(8))
    assert min(r.seconds for r in report.weight_load) == pytest.approx(1481.53)
    assert report.weight_load_seconds == pytest.approx(1481.82)
    assert all(r.source == "elapsed" for r in report.weight_load)
    assert report.cuda_graph_seconds == pytest.approx(84.73)
    assert report.cuda_graph_batch_sizes == [1, 2, 4]
    assert report.piecewise.began and not report.piecewise.finished
    assert len(report.piecewise.num_tokens) == 42
    assert report.piecewise.num_tokens[0] == 4 and report.piecewise.num_tokens[-1] == 2048
    [moe] = report.moe_config_missing
    assert (moe.device, moe.E, moe.N) == ("NVIDIA_H20-3e", 129, 384)
    assert moe.path == MOE_PATH
    assert not report.ready


def test_record_numbers_exceed_a_30_minute_startup_probe() -> None:
    report = parse_startup_log(record_first_start())
    check = startup_budget_check(report, configured_seconds=30 * 60)
    assert check.status is Status.FAIL
    assert check.data["required_seconds"] > 30 * 60
    assert "at least" in check.detail  # piecewise never finished: a lower bound
    # even the two finished phases alone, with the margin, exceed 30 minutes
    need = required_startup_seconds(report)
    assert need.phases["weight_load"] + need.phases["cuda_graph_capture"] == pytest.approx(
        1481.82 + 84.73)
    assert need.required_seconds > 1800 and not need.complete


def test_second_start_fits_60_minutes_and_budget_is_derived() -> None:
    log = "\n".join(
        [f"[2026-05-12 10:00:00 TP{r}] Load weight begin. avail mem=94.41 GB" for r in range(8)]
        + [f"[2026-05-12 10:12:{14 + r} TP{r}] Load weight end. elapsed={734 + r * 4.1:.2f} s, "
           f"type=MiniMaxM3ForConditionalGeneration, dtype=torch.bfloat16, avail mem=36.12 GB, "
           f"mem usage=58.29 GB." for r in range(8)]
        + ["[2026-05-12 10:12:50 TP0] Capture cuda graph bs [1, 2, 4]",
           "[2026-05-12 10:13:35 TP0] Capture cuda graph end. Time elapsed: 45.02 s. mem "
           "usage=0.41 GB. avail mem=19.90 GB.",
           "[2026-05-12 10:13:50] The server is fired up and ready to roll!"])
    report = parse_startup_log(log)
    assert report.ready and not report.piecewise.began
    assert report.weight_load_seconds == pytest.approx(734 + 7 * 4.1)
    assert startup_budget_check(report, configured_seconds=60 * 60).status is Status.PASS
    need = required_startup_seconds(report)
    budget = ProbeBudget.covering(need.required_seconds)
    assert budget.total_seconds >= need.required_seconds > need.observed_seconds


def test_old_sglang_without_elapsed_uses_timestamps_per_rank() -> None:
    log = ("[2025-10-16 09:06:10 TP0] Load weight begin. avail mem=137.34 GB\n"
           "[2025-10-16 09:06:10 DP1 TP1 EP1] Load weight begin. avail mem=137.29 GB\n"
           "[2025-10-16 09:08:40 TP0] Load weight end. type=Qwen3MoeForCausalLM, "
           "dtype=torch.bfloat16, avail mem=120.01 GB, mem usage=17.33 GB.\n"
           "[2025-10-16 09:08:42 DP1 TP1 EP1] Load weight end. type=Qwen3MoeForCausalLM, "
           "dtype=torch.bfloat16, avail mem=120.01 GB, mem usage=17.33 GB.\n")
    report = parse_startup_log(log)
    assert [(r.rank, r.seconds, r.source) for r in report.weight_load] == [
        (0, 150.0, "timestamps"), (1, 152.0, "timestamps")]


def test_no_weight_load_is_not_a_pass() -> None:
    report = parse_startup_log("hello\n[2026-01-01 00:00:00 TP0] something else\n")
    check = startup_budget_check(report, configured_seconds=3600)
    assert check.status is Status.DEFERRED and "weight_load" in check.detail


def test_vllm_lines() -> None:
    log = ("(VllmWorker rank=1 pid=311) INFO 08-14 12:58:01 [default_loader.py:262] Loading "
           "weights took 612.40 seconds\n"
           "(VllmWorker rank=1 pid=311) INFO 08-14 12:58:02 [gpu_model_runner.py:2007] Model "
           "loading took 58.3 GiB and 615.12 seconds\n"
           "INFO 08-14 12:59:50 [gpu_model_runner.py:2592] Graph capturing finished in 21 secs, "
           "took 0.52 GiB\n"
           "INFO:     Application startup complete.\n")
    report = parse_startup_log(log, engine="vllm")
    assert report.weight_load[0].rank == 1 and report.weight_load[0].seconds == 615.12
    assert report.cuda_graph_seconds == 21 and report.ready


def test_the_engine_is_told_by_the_logs_own_lines(tmp_path: Path) -> None:
    """`launch-log parse` without --engine: sglang for the record's log, vllm for vLLM's lines,
    neither for text that is no engine's (then the report says unknown, never a guess)."""
    from imagekit.launch.startup_log import engine_of_log

    vllm = ("(VllmWorker rank=1 pid=311) INFO 08-14 12:58:02 [gpu_model_runner.py:2007] Model "
            "loading took 58.3 GiB and 615.12 seconds\n")
    assert engine_of_log(record_first_start()) == "sglang"
    assert engine_of_log(vllm) == "vllm"
    assert engine_of_log("hello\nworld\n") is None
    assert engine_of_log(record_first_start() + vllm) is None   # both: not a guess
    log = tmp_path / "vllm.log"
    log.write_text(vllm)
    done = subprocess.run([sys.executable, "-m", "imagekit", "launch-log", "parse", str(log),
                           "--json"], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ["PATH"], "IMAGEKIT_EVIDENCE_DIR": str(tmp_path)})
    assert json.loads(done.stdout)["startup"]["engine"] == "vllm", done.stderr


def test_launch_log_parse_cli_judges_budget_and_keeps_evidence(tmp_path: Path) -> None:
    log = tmp_path / "sglang-start1.log"
    log.write_text(record_first_start())
    evidence = tmp_path / "evidence"
    result = subprocess.run(
        [sys.executable, "-m", "imagekit", "launch-log", "parse", str(log), "--json",
         "--startup-probe-seconds", "1800", "--evidence-key", "sha256:" + "a" * 64],
        capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "IMAGEKIT_EVIDENCE_DIR": str(evidence)})
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["check"]["status"] == "FAIL"
    assert doc["startup"]["moe_config_missing"][0]["E"] == 129
    assert doc["suggested_startup_probe"]["total_seconds"] >= doc["required"]["required_seconds"]
    attempt = Path(doc["evidence"])
    assert (attempt / "startup.log").read_text() == log.read_text()
    assert json.loads((attempt / "startup.json").read_text())["piecewise"]["began"] is True


def _parse(log: Path, evidence: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "imagekit", "launch-log", "parse", str(log), "--json",
         "--evidence-key", "name-startup-test", *extra], capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "IMAGEKIT_EVIDENCE_DIR": str(evidence)})


def test_a_log_with_no_startup_phase_is_never_a_pass(tmp_path: Path) -> None:
    """Text that is no engine's startup log (was: engine-startup PASS, "2 lines parsed")."""
    log = tmp_path / "not-a-startup.log"
    log.write_text("hello\nworld\n")
    result = _parse(log, tmp_path / "ev")
    assert result.returncode == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["check"]["name"] == "startup_log_parsed" and doc["check"]["status"] == "FAIL"
    statuses = [json.loads(p.read_text())["status"]
                for p in (tmp_path / "ev").rglob("attempt.json")]
    assert statuses == ["FAIL"]
    # the same command on a real startup log records the PASS (the check can pass)
    log.write_text(record_first_start())
    result = _parse(log, tmp_path / "ev2")
    assert result.returncode == 0, result.stderr
    assert [c["status"] for c in json.loads(result.stdout)["checks"]] == []
    statuses = [json.loads(p.read_text())["status"]
                for p in (tmp_path / "ev2").rglob("attempt.json")]
    assert statuses == ["PASS"]


@pytest.mark.parametrize("args, message", [
    (["cluster", "precheck", "--toleration", "nvidia.com/gpu"], "toleration must look like"),
    (["cluster", "precheck", "--selector", "novalue"], "selector must look like key=value"),
    (["cluster", "precheck", "--preemption-policy", "Sometimes"], "preemption policy must be"),
    (["cluster", "probe", "Not A Reference"], "reference"),
    (["launch-log", "parse", "/nonexistent.log"], "startup log not found"),
])
def test_bad_cluster_input_is_one_line_exit_2(args: list[str], message: str, tmp_path: Path
                                              ) -> None:
    result = subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                            text=True, timeout=60,
                            env={"PATH": os.environ["PATH"], "KUBECONFIG": "/nonexistent",
                                 "IMAGEKIT_STATE_DIR": str(tmp_path),
                                 "IMAGEKIT_EVIDENCE_DIR": str(tmp_path)})
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: ") and message in lines[0]


def test_engine_pod_env_reproduces_the_serve_command() -> None:
    from imagekit.launch.pod import engine_pod

    config = ServeConfig.build(engine="sglang", max_context=8192, max_requests=4, tp=8)
    need = required_startup_seconds(parse_startup_log(record_first_start()))
    budget = ProbeBudget.covering(need.required_seconds)
    pod, configmap = engine_pod(config, "127.0.0.1:5003/imagekit/sglang-fixed@sha256:" + "a" * 64,
                                budget, name="m3", namespace="serve", model_claim="m3-weights")
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["EXECUTE"] == "1"
    printed = launch_sh({k: v for k, v in env.items() if k != "EXECUTE"})
    assert shlex.split(printed.stdout) == serve_argv(config)
    assert configmap["data"]["launch.sh"] == LAUNCH.read_text()
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= need.required_seconds > 1800
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert "127.0.0.1:30000/health" in container["readinessProbe"]["exec"]["command"][-1]


def test_runtime_log_must_confirm_prefill_graphs_disabled() -> None:
    from imagekit.launch.startup_log import prefill_graphs_check

    first = parse_startup_log(record_first_start())          # piecewise capture began
    assert prefill_graphs_check(first, expect_disabled=True).status is Status.FAIL
    assert prefill_graphs_check(first, expect_disabled=False).status is Status.PASS
    second = parse_startup_log(
        "[2026-05-12 10:00:00] server_args=ServerArgs(model_path='/models/model', tp_size=8, "
        "context_length=8192, max_running_requests=4, cuda_graph_backend_prefill='disabled', "
        "cuda_graph_max_bs=4)\n"
        "[2026-05-12 10:13:35 TP0] Capture cuda graph end. Time elapsed: 45.02 s. mem "
        "usage=0.41 GB. avail mem=19.90 GB.\n"
        "[2026-05-12 10:13:50] The server is fired up and ready to roll!\n")
    assert second.prefill_backend == "disabled"
    ok = prefill_graphs_check(second, expect_disabled=True)
    assert ok.status is Status.PASS and "server args say disabled" in ok.detail
    early = parse_startup_log("[2026-05-12 10:00:00 TP0] Load weight begin. avail mem=94 GB\n")
    assert prefill_graphs_check(early, expect_disabled=True).status is Status.DEFERRED


def test_launch_log_cli_prefill_check(tmp_path: Path) -> None:
    log = tmp_path / "start1.log"
    log.write_text(record_first_start())
    result = subprocess.run(
        [sys.executable, "-m", "imagekit", "launch-log", "parse", str(log),
         "--expect-prefill-graphs", "disabled"], capture_output=True, text=True, timeout=60,
        env={"PATH": os.environ["PATH"], "IMAGEKIT_EVIDENCE_DIR": str(tmp_path)})
    assert result.returncode == 1
    assert "FAIL prefill_graphs: piecewise (prefill) CUDA graph capture ran" in result.stdout
