"""Per-engine request fields and the known-defect table are data a run can override."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.acceptance import load_engine_config, normalise_base_url
from imagekit.acceptance.engines import detect_engine
from imagekit.errors import InvalidInput


def test_defaults_have_three_modes_per_engine_and_the_sglang_defect() -> None:
    config = load_engine_config()
    for engine in ("vllm", "sglang"):
        assert set(config.profile(engine).modes) == {"disabled", "adaptive", "enabled"}
        assert config.profile(engine).load["ignore_eos"] is True
    defect = config.known_defect("sglang", "0.5.4", "corrupt-png", 500)
    assert defect is not None and "s.11" in defect.note
    assert config.known_defect("sglang", "0.5.4", "corrupt-png", 502) is None
    assert config.known_defect("vllm", "0.11.0", "corrupt-png", 500) is None


def test_override_replaces_a_mode_and_keeps_the_others(tmp_path: Path) -> None:
    path = tmp_path / "engines.toml"
    path.write_text('[engines.vllm.modes.disabled]\nreasoning_effort = "none"\n'
                    '[engines.tgi.modes.enabled]\nthinking = true\n')
    config = load_engine_config(path)
    assert config.profile("vllm").modes["disabled"] == {"reasoning_effort": "none"}
    assert "chat_template_kwargs" in config.profile("vllm").modes["adaptive"]
    assert config.profile("tgi").modes == {"enabled": {"thinking": True}}
    assert config.known_defects  # untouched when the override has none


@pytest.mark.parametrize("text", ["[engines.vllm]\nbogus = 1\n", "not toml ["])
def test_bad_engine_config_is_invalid_input(tmp_path: Path, text: str) -> None:
    path = tmp_path / "engines.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput):
        load_engine_config(path)


def test_unknown_engine_profile_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="no request profile"):
        load_engine_config().profile("tgi")


def test_engine_detected_from_owned_by() -> None:
    assert detect_engine([{"id": "m", "owned_by": "vllm"}]) == "vllm"
    assert detect_engine([{"id": "m", "owned_by": "sglang"}]) == "sglang"
    assert detect_engine([{"id": "m", "owned_by": "openai"}]) == "generic"


@pytest.mark.parametrize("url, expected", [
    ("http://h:8000", "http://h:8000"), ("http://h:8000/", "http://h:8000"),
    ("http://h:8000/v1", "http://h:8000"), ("https://h/v1/", "https://h"),
])
def test_base_url_normalised(url: str, expected: str) -> None:
    assert normalise_base_url(url) == expected


def test_example_engine_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "manifests" / \
        "acceptance" / "engines.example.toml"
    config = load_engine_config(example)
    assert config.profile("sglang").modes["enabled"]["separate_reasoning"] is True
    assert config.known_defect("sglang", "0.5.4", "corrupt-mp4", 500) is not None
