"""Every timing figure of a load round names its definition (RoundResult.definitions), so a
figure is never read against another tool's meaning of the same word."""

from __future__ import annotations

from imagekit.acceptance.models import LatencyStats, RoundResult, TimingDefinitions


def test_every_latency_figure_of_a_round_has_a_definition() -> None:
    figures = {name for name, info in RoundResult.model_fields.items()
               if info.annotation is LatencyStats} | {"requests_per_s"}
    assert figures == {"ttft", "itl", "tpot", "e2e", "requests_per_s"}
    defined = set(TimingDefinitions.model_fields)
    assert figures <= defined, figures - defined
    assert all(getattr(TimingDefinitions(), name).strip() for name in defined)


def test_a_round_saved_before_definitions_existed_reads_without_them() -> None:
    """Old evidence is not given today's definitions: its client timed differently."""
    empty = LatencyStats().model_dump()
    old = {"spec": {"index": 1, "concurrency": 1, "input_tokens": 1, "output_tokens": 1,
                    "requests": 1}, "duration_s": 1.0, "completed": 1, "errors": 0,
           "prompt_tokens": 1, "completion_tokens": 1, "requests_per_s": 1.0,
           "output_tokens_per_s": 1.0, "ttft": empty, "itl": empty, "e2e": empty,
           "records": []}
    assert RoundResult.model_validate(old).definitions is None
