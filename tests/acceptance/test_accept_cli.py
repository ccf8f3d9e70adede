"""`imagekit accept` against the reference server (a fixture, never evidence about a model):
verdicts, exit codes, evidence contents, and the record's failure cases."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.cli import app
from imagekit.evidence import EvidenceStore

from .conftest import Ref, free_port

DIGEST = "sha256:" + "ab" * 32
FUNCTIONAL = ["mode-disabled", "mode-adaptive", "mode-enabled", "tool-calling", "streaming",
              "multi-turn", "image-solid-colour", "image-bordered", "image-chart",
              "video-colour-order", "invalid-parameters", "recovery", "mode-comparison"]


def accept(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    result = CliRunner().invoke(app, ["accept", *args, "--json",
                                      "--evidence-dir", str(tmp_path / "ev")])
    output = json.loads(result.stdout) if result.stdout.strip().startswith("{") else {}
    return result.exit_code, output, result.stderr


def statuses(output: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in output["checks"]}


def test_functional_suite_passes_twelve_checks_and_keeps_every_exchange(
        ref: Ref, tmp_path: Path) -> None:
    code, out, _ = accept(tmp_path, "--base-url", ref.url + "/v1", "--evidence-key", DIGEST)
    assert code == 0, out
    assert list(statuses(out)) == FUNCTIONAL
    assert set(statuses(out).values()) == {"PASS"}
    assert out["target"]["engine"] == "vllm" and out["digest"] == DIGEST
    attempt = Path(out["evidence"]["functional"])
    assert attempt.parent.name == "accept-functional" and "ab" * 32 in str(attempt)
    exchanges = sorted((attempt / "exchanges").iterdir())
    assert len(exchanges) >= 20
    invalid = [json.loads(p.read_text()) for p in exchanges if "invalid" in p.name]
    assert [e["status_code"] for e in invalid] == [400, 400, 400, 404]
    assert invalid[0]["request"]["max_tokens"] == -5
    record = EvidenceStore(tmp_path / "ev").latest(DIGEST, "accept-functional")
    assert record is not None and record.status.value == "PASS" and len(record.checks) == 13


def test_disabled_mode_264_is_a_fail_with_reproductions_tokens_and_latency(
        ref: Ref, tmp_path: Path) -> None:
    ref.set(disabled_mode_answer=264)
    code, out, _ = accept(tmp_path, "--base-url", ref.url)
    assert code == 1
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["mode-disabled"]["status"] == "FAIL"
    detail = checks["mode-disabled"]["detail"]
    assert "0/3" in detail and "'264'" in detail and "output tokens" in detail
    assert "latency" in detail and "reproductions of one problem" in detail
    assert checks["mode-adaptive"]["status"] == checks["mode-enabled"]["status"] == "PASS"
    # the record's mode comparison: correctness, output tokens and latency together; the
    # disabled mode's shorter wrong answer is not preferred
    comparison = checks["mode-comparison"]
    assert comparison["status"] == "PASS", comparison
    assert "disabled: 0/3 correct" in comparison["detail"]
    assert "preferred adaptive" in comparison["detail"] or \
        "preferred enabled" in comparison["detail"]
    assert "not preferred although shorter: disabled" in comparison["detail"]


def test_solid_colour_failure_is_not_overridden_by_bordered_or_chart(
        ref: Ref, tmp_path: Path) -> None:
    ref.set(fail_solid_colours=True)
    code, out, _ = accept(tmp_path, "--base-url", ref.url)
    assert code == 1
    s = statuses(out)
    assert s["image-solid-colour"] == "FAIL"
    assert s["image-bordered"] == s["image-chart"] == s["video-colour-order"] == "PASS"
    detail = next(c["detail"] for c in out["checks"] if c["name"] == "image-solid-colour")
    assert "semantic FAIL: 0/6" in detail and "protocol PASS" in detail and "solid-red.png" in detail and "solid-blue.jpeg" in detail
    checks = json.loads((Path(out["evidence"]["functional"]) / "checks.json").read_text())
    pixels = next(c for c in checks if c["name"] == "image-solid-colour")["data"]["pixels_sent"]
    assert pixels["solid-red.png"] == [[224 * 224, [255, 0, 0]]]
    assert pixels["solid-blue.png"] == [[224 * 224, [0, 0, 255]]]


@pytest.mark.parametrize("behaviour", [{"tool_ignores_result": True}, {"no_tool_calls": True}])
def test_tool_calling_needs_a_call_and_a_used_result(ref: Ref, tmp_path: Path,
                                                     behaviour: dict) -> None:
    ref.set(**behaviour)
    code, out, _ = accept(tmp_path, "--base-url", ref.url)
    assert code == 1 and statuses(out)["tool-calling"] == "FAIL"
    assert [k for k, v in statuses(out).items() if v != "PASS"] == ["tool-calling"]


def test_streaming_without_usage_fails(ref: Ref, tmp_path: Path) -> None:
    ref.set(omit_usage=True)
    _, out, _ = accept(tmp_path, "--base-url", ref.url)
    streaming = next(c for c in out["checks"] if c["name"] == "streaming")
    assert streaming["status"] == "FAIL" and "usage" in streaming["detail"]


def test_invalid_parameters_answered_500_fail(ref: Ref, tmp_path: Path) -> None:
    ref.set(invalid_params_status=500, engine="sglang")
    _, out, _ = accept(tmp_path, "--base-url", ref.url)
    check = next(c for c in out["checks"] if c["name"] == "invalid-parameters")
    assert check["status"] == "FAIL" and "HTTP 500 from sglang" in check["detail"]


def test_video_deferred_without_pyav(ref: Ref, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "av", None)
    code, out, _ = accept(tmp_path, "--base-url", ref.url)
    video = next(c for c in out["checks"] if c["name"] == "video-colour-order")
    assert video["status"] == "DEFERRED" and "PyAV" in video["detail"]
    assert code == 1


def test_api_key_is_sent_but_never_recorded(ref: Ref, tmp_path: Path, secret_file) -> None:
    secret = "sk-ref-7f3a9c1e5b"
    ref.set(api_key=secret)
    key_file = secret_file(tmp_path / "key", secret + "\n")  # 0600, removed afterwards
    result = CliRunner().invoke(app, ["accept", "--base-url", ref.url, "--suite", "media",
                                      "--api-key-file", str(key_file), "--json",
                                      "--evidence-dir", str(tmp_path / "ev")])
    assert result.exit_code == 0, result.output
    assert f"Bearer {secret}" in ref.seen_auth()
    assert secret not in result.output
    for path in (tmp_path / "ev").rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path


def test_wrong_api_key_fails_checks_not_crashes(ref: Ref, tmp_path: Path) -> None:
    ref.set(api_key="right")
    code, _, err = accept(tmp_path, "--base-url", ref.url, "--suite", "media")
    assert code == 1


def test_unreachable_server_is_exit_2_one_line(tmp_path: Path) -> None:
    code, out, err = accept(tmp_path, "--base-url", f"http://127.0.0.1:{free_port()}")
    assert code == 2 and out == {}
    assert err.startswith("imagekit: error: server unreachable") and err.count("\n") == 1


@pytest.mark.parametrize("args, words", [
    (["--suite", "nonsense"], "unknown suite"),
    (["--engine", "tgi"], "unknown engine"),
    (["--evidence-key", "sha256:nothex"], "digest"),
    (["--needle-wrapper", "fancy"], "unknown needle wrapper"),
])
def test_bad_input_is_exit_2(ref: Ref, tmp_path: Path, args: list[str], words: str) -> None:
    code, _, err = accept(tmp_path, "--base-url", ref.url, *args)
    assert code == 2 and words in err and err.count("\n") == 1


def test_base_url_must_be_http(tmp_path: Path) -> None:
    code, _, err = accept(tmp_path, "--base-url", "ftp://x")
    assert code == 2 and "http" in err


def test_slow_server_past_timeout_fails_checks(ref: Ref, tmp_path: Path) -> None:
    ref.set(delay_s=1.0)
    code, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "media",
                          "--request-timeout", "0.3")
    assert code == 1
    checks = {c["name"]: c for c in out["checks"]}
    # no valid image was accepted first (the probe timed out): corrupt media is not judged
    png = checks["corrupt-png"]
    assert png["status"] == "DEFERRED" and "image capability unknown" in png["detail"]
    assert "ReadTimeout" in png["detail"]
    recovery = checks["recovery-after-corrupt-media"]
    assert recovery["status"] == "FAIL" and "no HTTP answer" in recovery["detail"]


def test_dropped_stream_fails_streaming(ref: Ref, tmp_path: Path) -> None:
    ref.set(drop_every=1)
    _, out, _ = accept(tmp_path, "--base-url", ref.url, "--reproductions", "1")
    streaming = next(c for c in out["checks"] if c["name"] == "streaming")
    assert streaming["status"] == "FAIL" and "RemoteProtocolError" in streaming["detail"]


def test_bad_evidence_name_is_rejected_before_any_request(ref: Ref, tmp_path: Path) -> None:
    code, _, err = accept(tmp_path, "--base-url", ref.url, "--evidence-key", "my run")
    assert code == 2 and "not a usable name" in err
    assert ref.seen_auth() == []


def test_unserved_model_is_bad_input(ref: Ref, tmp_path: Path) -> None:
    code, _, err = accept(tmp_path, "--base-url", ref.url, "--model", "other-model")
    assert code == 2 and "not served here" in err and "ref-model" in err


def test_report_lists_correctness_tokens_and_latency_per_reproduction(
        ref: Ref, tmp_path: Path) -> None:
    ref.set(disabled_mode_answer=264)
    _, out, _ = accept(tmp_path, "--base-url", ref.url)
    report = (Path(out["evidence"]["functional"]) / "report.md").read_text()
    section = report.split("## mode-disabled", 1)[1].split("## ", 1)[0]
    assert "reproductions of one problem" in section
    assert "| case | expected | answer | correct | output_tokens | latency_s |" in section
    assert section.count("| 240 | 264 | False |") == 3


def test_credentials_in_the_url_never_reach_output_or_evidence(ref: Ref, tmp_path: Path) -> None:
    url = ref.url.replace("http://", "http://user:hunter2pass@")
    code, out, _ = accept(tmp_path, "--base-url", url, "--suite", "media")
    assert code == 0 and out["target"]["base_url"] == ref.url
    for path in (tmp_path / "ev").rglob("*"):
        if path.is_file():
            assert b"hunter2pass" not in path.read_bytes()
    dead = f"http://user:hunter2pass@127.0.0.1:{free_port()}"
    code, _, err = accept(tmp_path, "--base-url", dead)
    assert code == 2 and "hunter2pass" not in err


def test_a_broken_suite_is_an_error_check_with_exit_2(ref: Ref, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from imagekit.acceptance import runner

    async def broken(ctx: object) -> list:
        raise RuntimeError("suite bug")

    monkeypatch.setitem(runner.SUITES, "media", broken)
    code, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "media")
    assert code == 2 and out["checks"][0]["status"] == "ERROR"
    assert "suite bug" in out["checks"][0]["detail"]
    assert (Path(out["evidence"]["media"]) / "error.log").is_file()


def test_generic_engine_judges_the_protocol_and_defers_modes(ref: Ref, tmp_path: Path) -> None:
    code, out, _ = accept(tmp_path, "--base-url", ref.url, "--engine", "generic",
                          "--reproductions", "1")
    checks = {c["name"]: c for c in out["checks"]}
    assert code == 1 and out["target"]["engine"] == "generic"
    assert checks["mode-disabled"]["status"] == "DEFERRED"
    assert "no request fields" in checks["mode-disabled"]["detail"]
    for name in ("streaming", "tool-calling", "invalid-parameters", "recovery", "multi-turn"):
        assert checks[name]["status"] == "PASS", checks[name]
    assert checks["streaming"]["protocol"] == checks["streaming"]["semantic"] == "PASS"


def test_bad_require_is_one_line_exit_2(ref: Ref, tmp_path: Path) -> None:
    code, _, err = accept(tmp_path, "--base-url", ref.url, "--require-capability", "audio")
    assert code == 2 and "unknown required capability 'audio'" in err
