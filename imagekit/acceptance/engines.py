"""Per-engine request fields and expectations, as data (TOML) that a run can override.

Why data: the fields that switch a model's inference mode live in its chat template and differ
between engines and releases (`chat_template_kwargs`, `reasoning_effort`, `thinking`, …). The
defaults below are a starting point; `--engine-config FILE` replaces any table in them.

Known defects are version-aware expectations: a release known to answer 500 for corrupted media
(record, section 11) is still a FAIL, but the report names it a known upstream defect instead of
a new finding.
"""

from __future__ import annotations

import copy
import fnmatch
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from imagekit.errors import InvalidInput

MODES = ("disabled", "adaptive", "enabled")

DEFAULT_ENGINES_TOML = """
# Request fields merged into the chat request body for each inference mode.
[engines.vllm.modes.disabled]
chat_template_kwargs = { thinking_mode = "disabled", enable_thinking = false }
[engines.vllm.modes.adaptive]
chat_template_kwargs = { thinking_mode = "adaptive" }
[engines.vllm.modes.enabled]
chat_template_kwargs = { thinking_mode = "enabled", enable_thinking = true }

[engines.sglang.modes.disabled]
chat_template_kwargs = { thinking_mode = "disabled", enable_thinking = false }
[engines.sglang.modes.adaptive]
chat_template_kwargs = { thinking_mode = "adaptive" }
[engines.sglang.modes.enabled]
chat_template_kwargs = { thinking_mode = "enabled", enable_thinking = true }
separate_reasoning = true

[engines.vllm.load]
# extra fields for load requests: run to exactly max_tokens so token counts can be checked
ignore_eos = true
[engines.sglang.load]
ignore_eos = true

[[known_defects]]
engine = "sglang"
versions = ["*"]
checks = ["corrupt-png", "corrupt-mp4"]
observed_status = 500
note = "PIL / TorchCodec decode errors wrapped as RuntimeError, answered 500 (record s.11)"
"""


class KnownDefect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    versions: list[str] = ["*"]
    checks: list[str]
    observed_status: int | None = None
    note: str


class EngineProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    modes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    load: dict[str, Any] = Field(default_factory=dict)
    corrupt_media_status: int = 400


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    engines: dict[str, EngineProfile]
    known_defects: list[KnownDefect] = []

    def profile(self, engine: str) -> EngineProfile:
        if engine not in self.engines:
            raise InvalidInput(f"no request profile for engine {engine!r}; known: "
                               f"{', '.join(sorted(self.engines))}")
        return self.engines[engine]

    def known_defect(self, engine: str, version: str | None, check: str,
                     status: int | None) -> KnownDefect | None:
        for defect in self.known_defects:
            if defect.engine != engine or check not in defect.checks:
                continue
            if defect.observed_status is not None and defect.observed_status != status:
                continue
            if any(fnmatch.fnmatch(version or "", pattern) or pattern == "*"
                   for pattern in defect.versions):
                return defect
        return None


def _merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if key == "known_defects":
            out[key] = value
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value) if key != "modes" else {**out[key], **value}
        else:
            out[key] = value
    return out


def load_engine_config(path: Path | None = None) -> EngineConfig:
    """Defaults, with the tables of `path` replacing theirs (mode tables replace whole modes,
    a `known_defects` list replaces the list)."""
    data = tomllib.loads(DEFAULT_ENGINES_TOML)
    if path is not None:
        try:
            extra = tomllib.loads(Path(path).read_text())
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise InvalidInput(f"cannot read engine config: {exc}", where=str(path)) from None
        data = _merge(data, extra)
    try:
        return EngineConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(f"engine config invalid: {exc.errors()[0]['msg']} at "
                           f"{'.'.join(map(str, exc.errors()[0]['loc']))}",
                           where=str(path) if path else "defaults") from None


def detect_engine(models: list[dict]) -> str | None:
    """vLLM and SGLang both name themselves in `/v1/models` `owned_by`."""
    for model in models:
        owner = str(model.get("owned_by", "")).lower()
        for engine in ("vllm", "sglang"):
            if engine in owner:
                return engine
    return None
