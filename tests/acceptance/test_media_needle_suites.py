"""Corrupted media (400 expected, 500 FAIL with the engine named, known defects labelled, then
recovery) and the needle retest (wrappers recorded separately)."""

from __future__ import annotations

import json
from pathlib import Path

from imagekit.acceptance.needle import KEY_LABEL

from .conftest import Ref
from .test_accept_cli import accept, statuses


def test_vllm_like_400_passes_and_process_survives(ref: Ref, tmp_path: Path) -> None:
    code, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "media")
    assert code == 0
    assert statuses(out) == {"corrupt-png": "PASS", "corrupt-mp4": "PASS",
                             "recovery-after-corrupt-media": "PASS"}


def test_sglang_like_500_is_fail_named_and_known_defect_but_recovery_passes(
        ref: Ref, tmp_path: Path) -> None:
    ref.set(engine="sglang", version="0.5.4")
    code, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "media")
    assert code == 1
    checks = {c["name"]: c for c in out["checks"]}
    for name in ("corrupt-png", "corrupt-mp4"):
        assert checks[name]["status"] == "FAIL"
        assert "sglang answered HTTP 500" in checks[name]["detail"]
        assert "known upstream defect (sglang 0.5.4)" in checks[name]["detail"]
    assert checks["recovery-after-corrupt-media"]["status"] == "PASS"
    attempt = Path(out["evidence"]["media"])
    failed = json.loads(next((attempt / "exchanges").glob("*corrupt-png*")).read_text())
    assert failed["status_code"] == 500 and "cannot load image" in failed["response"]["message"]
    assert failed["request"]["messages"][0]["content"][0]["type"] == "image_url"


def test_known_defect_table_is_version_aware(ref: Ref, tmp_path: Path) -> None:
    config = tmp_path / "engines.toml"
    config.write_text('[[known_defects]]\nengine = "sglang"\nversions = ["0.4.*"]\n'
                      'checks = ["corrupt-png", "corrupt-mp4"]\nobserved_status = 500\n'
                      'note = "fixed after 0.4"\n')
    ref.set(engine="sglang", version="0.5.4")
    code, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "media",
                          "--engine-config", str(config))
    png = next(c for c in out["checks"] if c["name"] == "corrupt-png")
    assert code == 1 and png["status"] == "FAIL" and "known upstream defect" not in png["detail"]
    code, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "media",
                          "--engine-config", str(config), "--engine-version", "0.4.9")
    png = next(c for c in out["checks"] if c["name"] == "corrupt-png")
    assert png["status"] == "FAIL" and "known upstream defect (sglang 0.4.9)" in png["detail"]


def test_vllm_engine_answering_500_is_a_fail_without_known_defect(ref: Ref,
                                                                   tmp_path: Path) -> None:
    ref.set(corrupt_status=500)
    _, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "media")
    png = next(c for c in out["checks"] if c["name"] == "corrupt-png")
    assert png["status"] == "FAIL" and "vllm answered HTTP 500" in png["detail"]
    assert "known upstream defect" not in png["detail"]


def test_server_down_after_corrupt_media_fails_recovery(ref: Ref, tmp_path: Path) -> None:
    ref.set(down_after_corrupt=True)
    _, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "media")
    assert statuses(out)["recovery-after-corrupt-media"] == "FAIL"


def test_needle_wrappers_recorded_separately(ref: Ref, tmp_path: Path) -> None:
    ref.set(needle_original_not_found=True)
    code, out, _ = accept(tmp_path, "--base-url", ref.url, "--suite", "needle",
                          "--needle-tokens", "2000")
    assert code == 1
    checks = {c["name"]: c for c in out["checks"]}
    assert checks["needle-original"]["status"] == "FAIL"
    assert "0/9" in checks["needle-original"]["detail"]
    assert "1/1 no-answer control" in checks["needle-original"]["detail"]
    assert checks["needle-explicit"]["status"] == "PASS"
    assert "9/9" in checks["needle-explicit"]["detail"]
    attempt = Path(out["evidence"]["needle"])
    files = sorted((attempt / "exchanges").iterdir())
    assert len(files) == 20
    original = [json.loads(f.read_text()) for f in files if "original" in f.name]
    explicit = [json.loads(f.read_text()) for f in files if "explicit" in f.name]
    doc_o = original[0]["request"]["messages"][0]["content"]
    doc_e = explicit[0]["request"]["messages"][0]["content"]
    body = doc_e.split("<document>\n", 1)[1].split("\n</document>", 1)[0]
    assert body in doc_o and KEY_LABEL in body
    checks_file = json.loads((attempt / "checks.json").read_text())
    samples = checks_file[0]["data"]["samples"]
    assert [s["position"] for s in samples[:9]] == [0.1] * 3 + [0.5] * 3 + [0.9] * 3
    assert samples[9]["has_key"] is False and samples[0]["document"]["key"]
