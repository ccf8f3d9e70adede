"""Stand-in models (deterministic, marked random), `--require` parsing, the engine venv marker
and engine detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagekit.acceptance.capabilities import Capabilities, Capability, Requirements, \
    requirement_checks
from imagekit.acceptance.engines import detect_engine, load_engine_config
from imagekit.errors import InvalidInput
from imagekit.infra import engines
from imagekit.standins import models


def test_require_parses_and_refuses_bad_items() -> None:
    req = Requirements.parse("image,video,tools,ctx=32768")
    assert (req.image, req.video, req.tools, req.ctx) == (True, True, True, 32768)
    assert Requirements.parse("") == Requirements()
    for bad in ("audio", "ctx=", "ctx=big", "image=1"):
        with pytest.raises(InvalidInput):
            Requirements.parse(bad)


def test_required_capability_absent_fails_present_passes() -> None:
    refused = Capability(name="image", present=False, status_code=400,
                         words="m is not a multimodal model")
    caps = Capabilities(image=refused, video=refused.model_copy(update={"name": "video"}),
                        tools=Capability(name="tools", present=True), max_model_len=4096)
    checks = {c.name: c for c in requirement_checks(
        caps, Requirements(image=True, tools=True, ctx=32768))}
    assert checks["require-image"].status.value == "FAIL"
    assert "is not a multimodal model" in checks["require-image"].detail
    assert checks["require-tools"].status.value == "PASS"
    assert checks["require-ctx"].status.value == "FAIL" and "4096" in checks["require-ctx"].detail
    assert requirement_checks(caps, Requirements()) == []


def test_engine_detection_and_profiles() -> None:
    assert detect_engine([{"id": "imagekit-standin/tiny-llava",
                           "owned_by": "imagekit-standin"}]) == "transformers"
    assert detect_engine([{"id": "org/m@main", "owned_by": "x"}]) == "transformers"
    assert detect_engine([{"id": "m", "owned_by": "someone"}]) == "generic"
    config = load_engine_config()
    assert config.profile("generic").modes == {} and config.profile("transformers").load == {}
    [seen] = config.observed_for("transformers", "5.17.0", "corrupt-png")
    assert "500" in seen.behaviour
    assert config.observed_for("transformers", "5.18.0", "corrupt-png") == []
    assert config.observed_for("vllm", "0.32.0", "tool-calling")


def test_standin_names_and_engine_marker(tmp_path: Path) -> None:
    assert models.is_standin("imagekit-standin/llama-text-32k")
    assert models.is_standin("imagekit-standin/tiny-llava@main")
    assert not models.is_standin("Qwen/Qwen3-8B") and not models.is_standin(None)
    spec = engines.EngineSpec(name="x", version="1", requirements=("a==1",))
    assert not engines.installed(spec, tmp_path)
    (tmp_path / "x-1" / "bin").mkdir(parents=True)
    (tmp_path / "x-1" / "bin" / "python").write_text("")
    (tmp_path / "x-1" / engines.MARKER).write_text(json.dumps({"requirements": ["a==2"]}))
    assert not engines.installed(spec, tmp_path)          # other requirements: reinstall
    (tmp_path / "x-1" / engines.MARKER).write_text(json.dumps({"requirements": ["a==1"]}))
    assert engines.installed(spec, tmp_path)


@pytest.mark.engine
@pytest.mark.slow
def test_standin_model_is_deterministic_marked_and_cached(tmp_path: Path) -> None:
    python = engines.ensure(engines.TRANSFORMERS_SERVE)
    cached = models.ensure_model("text", python)
    marker = json.loads((cached.snapshot / models.MARKER).read_text())
    assert marker["random_weights"] is True and marker["max_model_len"] == 32768
    assert "RANDOM WEIGHTS" in (cached.snapshot / "README.md").read_text()
    assert (cached.snapshot.parent.parent / "refs" / "main").read_text() == cached.snapshot.name
    assert models.ensure_model("text", python) == cached                 # cached by content
    fresh = models.ensure_model("text", python, root=tmp_path)
    assert fresh.key == cached.key
    assert models.file_digests(fresh.snapshot) == marker["files"]       # byte for byte
    config = json.loads((fresh.snapshot / "config.json").read_text())
    assert config["max_position_embeddings"] == 32768 and not config["tie_word_embeddings"]
    generation = json.loads((fresh.snapshot / "generation_config.json").read_text())
    assert config["eos_token_id"] not in generation["suppress_tokens"]
