"""The load regression compares per-request distributions, not two numbers: a clear
regression, a rerun, a straddling one, too few requests, goodput."""

from __future__ import annotations

import random

from imagekit.acceptance.regression import compare


def _round(ttft: list[float], *, slo: list[bool] | None = None) -> dict:
    records = [{"i": i, "ttft_s": t, "e2e_s": t * 3, "tpot_s": t / 4,
                "slo_met": None if slo is None else slo[i], "error": None}
               for i, t in enumerate(ttft)]
    srt = sorted(ttft)
    p50 = srt[len(srt) // 2]
    return {"round-01-text-c1-in64-out8": {
        "records": records, "goodput": None if slo is None else sum(slo) / len(slo),
        "ttft": {"p50": p50, "p99": srt[-1]}, "tpot": {"p50": p50 / 4, "p99": srt[-1] / 4},
        "e2e": {"p50": p50 * 3, "p99": srt[-1] * 3}}}


def _noisy(rng: random.Random, n: int, scale: float = 1.0) -> list[float]:
    return [scale * 0.05 * rng.lognormvariate(0, 0.15) for _ in range(n)]


def test_a_slowed_server_regresses_and_a_rerun_does_not() -> None:
    rng = random.Random(11)
    base = _round(_noisy(rng, 12))
    problems, rows = compare(_round(_noisy(rng, 12, 1.5)), base, 0.2)
    assert problems and all("whole interval" in p for p in problems)
    assert {v["band"] for v in rows[0]["verdicts"].values()} == {"FAIL"}
    assert len(rows[0]["verdicts"]["ttft"]["samples"]) == 12
    problems, rows = compare(_round(_noisy(rng, 12)), base, 0.2)
    assert problems == [] and rows[0]["ttft_p50"][0] > 0


def test_two_numbers_that_differ_are_not_a_regression_inside_the_noise() -> None:
    """The old rule compared p50 with p50: +25 % > 20 % tolerance was a FAIL. The same 8
    requests' distributions overlap: within noise, named, not a regression."""
    before = [0.050, 0.052, 0.049, 0.080, 0.051, 0.048, 0.090, 0.050]
    after = [0.063, 0.062, 0.050, 0.081, 0.064, 0.049, 0.088, 0.065]
    problems, rows = compare(_round(after), _round(before), 0.2)
    assert problems == [] and "ttft" in rows[0]["within_noise"]


def test_too_few_requests_are_not_judged_and_goodput_is_a_share_interval() -> None:
    problems, rows = compare(_round([0.1]), _round([0.05]), 0.2)
    assert problems == [] and rows[0]["verdicts"]["ttft"]["band"] == "DEFERRED"
    assert any("ttft" in m for m in rows[0]["not_judged"])
    good = [True] * 40
    bad = [True] * 10 + [False] * 30
    problems, rows = compare(_round([0.05] * 40, slo=bad), _round([0.05] * 40, slo=good), 0.1)
    assert any("goodput 100% -> 25%" in p for p in problems)
    assert rows[0]["verdicts"]["goodput"]["band"] == "FAIL"
    one_less = [True] * 39 + [False]
    problems, _ = compare(_round([0.05] * 40, slo=one_less), _round([0.05] * 40, slo=good), 0.1)
    assert problems == []


def test_a_confidence_outside_zero_one_is_bad_input(tmp_path) -> None:
    import pytest

    from imagekit.acceptance.matrix import load_matrix
    from imagekit.errors import InvalidInput

    base = (__import__("pathlib").Path(__file__).resolve().parents[1] / "acceptance" /
            "matrix-slo.toml").read_text()
    for bad in ("1.5", "0", "1", "-0.2"):
        path = tmp_path / f"m{bad}.toml"
        path.write_text(base.replace("regression_tolerance = 0.5",
                                     f"regression_tolerance = 0.5\nregression_confidence = {bad}"))
        with pytest.raises(InvalidInput, match="regression_confidence"):
            load_matrix(path)
