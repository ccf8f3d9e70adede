"""The auditor's signed chain names what CI's test-result passed and what the image's own
engine parser took (its serve_args, read from the signed statement alone)."""

from __future__ import annotations

from imagekit.report.chain import summarize

TR = "https://in-toto.io/attestation/test-result/v0.1"


def test_the_signed_test_result_names_its_tests_and_the_parsed_serve_commands() -> None:
    lines = summarize(TR, {"predicate": {
        "result": "PASSED", "passedTests": ["probe:serve_args", "probe:pip_check"],
        "failedTests": [], "serveArgs": [
            {"status": "PASS", "engine": "sglang", "version": "0.5.23",
             "prefill_switch": "--cuda-graph-backend-prefill=disabled",
             "commands": [{"label": "gpu-launch", "status": "PASS"}]}, "not a report"]}})
    assert "passed: probe:serve_args, probe:pip_check" in lines
    assert ("serve_args PASS: parsed by sglang 0.5.23 (gpu-launch PASS; prefill switch "
            "--cuda-graph-backend-prefill=disabled)") in lines
    # a hostile or older statement: no serveArgs list, no passed names, still one summary line
    assert summarize(TR, {"predicate": {"serveArgs": "x", "passedTests": None}}) == [
        "result None: 0 passed, 0 warned, 0 failed"]
