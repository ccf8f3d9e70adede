"""`imagekit bench` (load matrix) against the reference server: counts checked against the
matrix's expectations, dropped connections counted as errors, latency percentiles measured."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.acceptance import load_matrix
from imagekit.acceptance.load import percentiles
from imagekit.cli import app

from .conftest import Ref

HERE = Path(__file__).parent
SMALL = HERE / "matrix-small.toml"
MAIN = HERE.parents[1] / "manifests/acceptance/matrix-vllm-main.toml"


def bench(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    result = CliRunner().invoke(app, ["bench", *args, "--json",
                                      "--evidence-dir", str(tmp_path / "ev")])
    output = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.exit_code, output, result.stderr


def test_main_matrix_mirrors_the_record_shape() -> None:
    rounds = load_matrix(MAIN).rounds()
    assert len(rounds) == 33 and sum(r.requests for r in rounds) == 3954
    assert {r.modality for r in rounds} == {"text", "image", "video"}
    assert all(r.input_tokens + r.output_tokens <= 32_768 for r in rounds)
    assert len({r.name for r in rounds}) == 33


def test_small_matrix_passes_with_counts_and_percentiles(ref: Ref, tmp_path: Path) -> None:
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SMALL),
                         "--evidence-key", "sha256:" + "cd" * 32)
    assert code == 0, out
    names = [c["name"] for c in out["checks"]]
    assert len(names) == 9 and names[-1] == "matrix-totals"
    assert "26 requests, 26 completed, 0 errors" in out["checks"][-1]["detail"]
    attempt = Path(out["evidence"]["bench"])
    assert attempt.parent.name == "bench" and "cd" * 32 in str(attempt)
    first = json.loads((attempt / "rounds" / "01-result.json").read_text())
    assert first["completed"] == 3 and first["completion_tokens"] == 3 * 8
    assert first["ttft"]["count"] == 3 and first["e2e"]["p99"] >= first["e2e"]["p50"] > 0
    assert len(first["records"]) == 3
    body = json.loads((attempt / "rounds" / "01-first-request.json").read_text())
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["ignore_eos"] is True and body["max_tokens"] == 8
    calibration = json.loads((attempt / "calibration.json").read_text())
    assert calibration["measured"] is True
    # text prompts land within tolerance of the target after calibration
    r2 = json.loads((attempt / "rounds" / "02-result.json").read_text())
    assert all(0.65 * 512 <= rec["prompt_tokens"] <= 1.35 * 512 for rec in r2["records"])
    image = json.loads((attempt / "rounds" / "05-first-request.json").read_text())
    assert image["messages"][0]["content"][0]["type"] == "image_url"
    video = json.loads((attempt / "rounds" / "06-first-request.json").read_text())
    assert video["messages"][0]["content"][0]["type"] == "video_url"


def test_dropped_connections_and_short_outputs_fail_their_rounds(ref: Ref,
                                                                 tmp_path: Path) -> None:
    ref.set(drop_every=4)
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SMALL))
    assert code == 1
    failed = [c for c in out["checks"] if c["status"] == "FAIL"]
    assert any("errors (max 0)" in c["detail"] and "RemoteProtocolError" in c["detail"]
               for c in failed)
    attempt = Path(out["evidence"]["bench"])
    failures = [json.loads(p.read_text()) for p in (attempt / "rounds").glob("*-failures.json")]
    assert failures and all(f["request"]["stream"] for batch in failures for f in batch)
    ref.set(drop_every=0, short_output=2)
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SMALL))
    assert code == 1
    assert "completions not exactly 8 output tokens (e.g. 6)" in out["checks"][0]["detail"]


def test_missing_usage_fails_token_check(ref: Ref, tmp_path: Path) -> None:
    ref.set(omit_usage=True)
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SMALL),
                         "--no-calibrate")
    assert code == 1 and "without usage token counts" in out["checks"][0]["detail"]


def test_slow_responses_show_in_ttft_and_itl(ref: Ref, tmp_path: Path) -> None:
    matrix = tmp_path / "slow.toml"
    matrix.write_text('name = "slow"\n[expect]\ninput_tolerance = 10\n[[matrix]]\n'
                      'concurrency = [2]\ninput_tokens = [16]\noutput_tokens = [4]\n'
                      'requests = 4\n')
    ref.set(delay_s=0.2, chunk_delay_s=0.05)
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(matrix),
                         "--no-calibrate")
    assert code == 0, out
    result = json.loads((Path(out["evidence"]["bench"]) / "rounds" / "01-result.json")
                        .read_text())
    assert result["ttft"]["p50"] >= 0.2 and result["itl"]["p50"] >= 0.04
    assert result["e2e"]["p50"] >= 0.2 + 4 * 0.05 - 0.01
    assert result["duration_s"] >= 2 * result["e2e"]["p50"] * 0.9  # 4 requests, 2 in flight


@pytest.mark.parametrize("text, words", [
    ("name = 1\n", "load matrix invalid"),
    ('name = "x"\n[[matrix]]\nconcurrency = []\ninput_tokens = [1]\noutput_tokens = [1]\n',
     "load matrix invalid"),
    ("not toml [", "cannot read load matrix"),
])
def test_bad_matrix_is_exit_2(ref: Ref, tmp_path: Path, text: str, words: str) -> None:
    matrix = tmp_path / "bad.toml"
    matrix.write_text(text)
    code, _, err = bench(tmp_path, "--base-url", ref.url, "--matrix", str(matrix))
    assert code == 2 and words in err and err.count("\n") == 1


def test_percentiles() -> None:
    stats = percentiles([float(i) for i in range(1, 101)])
    assert (stats.count, stats.p50, stats.p90, stats.max) == (100, 50.5, 90.1, 100.0)
    assert percentiles([]).p50 is None and percentiles([2.0]).p99 == 2.0


def test_importing_the_client_imports_no_engine_or_torch() -> None:
    code = ("import sys, imagekit.acceptance, imagekit.acceptance.runner, "
            "imagekit.acceptance.load, imagekit.cli.accept\n"
            "bad = [m for m in ('torch', 'vllm', 'sglang', 'av', 'triton') if m in sys.modules]\n"
            "assert not bad, bad\nprint('clean')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "clean", result.stderr


def test_semantic_warmup_gates_media_rounds_independently(ref: Ref, tmp_path: Path) -> None:
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SMALL))
    status = {c["name"]: c["status"] for c in out["checks"]}
    assert code == 0 and status["warmup-image"] == status["warmup-video"] == "PASS"
    assert (Path(out["evidence"]["bench"]) / "warmup" / "image.json").is_file()
    ref.set(fail_images=True)
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SMALL))
    checks = {c["name"]: c for c in out["checks"]}
    assert code == 1
    assert checks["warmup-image"]["status"] == "FAIL"
    assert "rounds left out" in checks["warmup-image"]["detail"]
    assert checks["round-05-image-c2-in32-out4"]["status"] == "DEFERRED"
    assert checks["warmup-video"]["status"] == "PASS"
    assert checks["round-06-video-c2-in32-out4"]["status"] == "PASS"
    assert checks["round-01-text-c1-in64-out8"]["status"] == "PASS"


def test_progress_bars_path_runs(ref: Ref, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import imagekit.cli.accept as accept_cli

    monkeypatch.setattr(accept_cli, "show_progress", lambda json_output: True)
    result = CliRunner().invoke(app, ["bench", "--base-url", ref.url, "--matrix", str(SMALL),
                                      "--evidence-dir", str(tmp_path / "ev")])
    assert result.exit_code == 0, result.output
    assert "matrix-totals" in result.stdout
    result = CliRunner().invoke(app, ["accept", "--base-url", ref.url, "--suite", "media",
                                      "--evidence-dir", str(tmp_path / "ev")])
    assert result.exit_code == 0, result.output
    assert "recovery-after-corrupt-media" in result.stdout


SLO = HERE / "matrix-slo.toml"


def test_poisson_arrivals_are_seeded_and_at_the_rate() -> None:
    from imagekit.acceptance.load import arrivals
    from imagekit.acceptance.models import RoundSpec

    spec = RoundSpec(index=3, concurrency=1, input_tokens=8, output_tokens=2, requests=2000,
                     rate=5.0)
    times = arrivals(spec)
    assert times == arrivals(spec) and times[0] == 0.0
    assert 4.5 < len(times) / times[-1] < 5.5                    # mean rate within 10 %
    assert [r.name for r in load_matrix(SLO).rounds()] == [
        "round-01-text-c2-in64-out8", "round-02-text-r4-in64-out8"]


def test_slo_goodput_tpot_open_loop_and_regression(ref: Ref, tmp_path: Path) -> None:
    first, second = "sha256:" + "a1" * 32, "sha256:" + "b2" * 32
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SLO), "--evidence-key",
                         first, "--compare-with", "reg.example/team/model")
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["regression"]["status"] == "DEFERRED"          # nothing accepted before
    assert "no previously accepted digest" in checks["regression"]["detail"]
    assert code == 1          # DEFERRED is no pass, yet the run counts as accepted (below)
    closed, poisson = checks["round-01-text-c2-in64-out8"], checks["round-02-text-r4-in64-out8"]
    assert closed["status"] == poisson["status"] == "PASS"
    assert "TPOT p50" in closed["detail"] and "goodput 100%" in closed["detail"]
    assert "open-loop Poisson 4 req/s" in poisson["detail"]
    result = json.loads(next((Path(out["evidence"]["bench"]) / "rounds").glob(
        "02-result.json")).read_text())
    assert result["arrival"] == "poisson" and result["goodput"] == 1.0
    assert all(r["sent_at_s"] is not None for r in result["records"])
    assert result["tpot"]["count"] == 4

    # the same image, a newer digest whose server answers slowly: regression FAIL
    ref.set(delay_s=0.3)
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SLO), "--evidence-key",
                         second, "--compare-with", "reg.example/team/model")
    regression = {c["name"]: c for c in out["checks"]}["regression"]
    assert regression["status"] == "FAIL", regression
    assert "a1" * 32 in regression["detail"] and "TTFT" in regression["detail"]
    assert "whole interval" in regression["detail"] and "p50" in regression["detail"]
    # a regressed digest never becomes the baseline: a third run still compares with the first
    ref.set(delay_s=0.0)
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(SLO), "--evidence-key",
                         "sha256:" + "c3" * 32, "--compare-with", "reg.example/team/model")
    regression = {c["name"]: c for c in out["checks"]}["regression"]
    assert "a1" * 32 in regression["detail"]


def test_goodput_below_the_floor_fails_the_round(ref: Ref, tmp_path: Path) -> None:
    strict = tmp_path / "strict.toml"
    strict.write_text(SLO.read_text().replace("e2e_ms = 60000", "e2e_ms = 0.001"))
    code, out, _ = bench(tmp_path, "--base-url", ref.url, "--matrix", str(strict))
    checks = {c["name"]: c for c in out["checks"]}
    assert code == 1
    detail = checks["round-01-text-c2-in64-out8"]["detail"]
    assert checks["round-01-text-c2-in64-out8"]["status"] == "FAIL"
    assert "goodput 0% below the floor 75% (SLO TTFT <= 30000ms and E2E <= 0.001ms)" in detail
