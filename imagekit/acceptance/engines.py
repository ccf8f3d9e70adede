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

# transformers serve 5.17 refuses unknown fields with 422 (FastAPI), so no mode fields and no
# ignore_eos: its modes are DEFERRED until a run sets them with --engine-config.
[engines.transformers]
[engines.generic]

[[known_defects]]
engine = "sglang"
versions = ["*"]
checks = ["corrupt-png", "corrupt-mp4"]
observed_status = 500
note = "PIL / TorchCodec decode errors wrapped as RuntimeError, answered 500 (record s.11)"

# Observed behaviours of real engines (measured on this project's CPU machine with stand-in
# models). They EXPLAIN a verdict in its detail; the rule still judges it.
[[observed]]
engine = "vllm"
versions = ["0.32.*"]
checks = ["invalid-parameters"]
behaviour = "400 BadRequestError {error: {message, type, param, code}}; unknown model 404"
[[observed]]
engine = "vllm"
versions = ["0.32.*"]
checks = ["streaming"]
behaviour = "stream ends with data: [DONE]; usage only with stream_options.include_usage"
[[observed]]
engine = "vllm"
versions = ["0.32.*"]
checks = ["image-solid-colour", "image-bordered", "image-chart", "video-colour-order",
          "corrupt-png", "corrupt-mp4", "require-image", "require-video"]
behaviour = "any image or video to a text model: 400 '... is not a multimodal model'"
[[observed]]
engine = "vllm"
versions = ["0.32.*"]
checks = ["tool-calling", "require-tools"]
behaviour = "tool_choice auto needs --enable-auto-tool-choice and --tool-call-parser, else 400"
[[observed]]
engine = "vllm"
versions = ["0.32.*"]
checks = ["needle-original", "needle-explicit"]
behaviour = "a prompt over max_model_len: 400 'This model's maximum context length is N tokens'"
[[observed]]
engine = "transformers"
versions = ["5.17.*"]
checks = ["streaming"]
behaviour = "stream has no data: [DONE]"
[[observed]]
engine = "transformers"
versions = ["5.17.*"]
checks = ["corrupt-png"]
behaviour = "corrupt image bytes: 500 text/plain (PIL UnidentifiedImageError)"
[[observed]]
engine = "transformers"
versions = ["5.17.*"]
checks = ["video-colour-order", "corrupt-mp4", "require-video"]
behaviour = "any video: 500 (its loader needs torchcodec, absent beside this torch)"
[[observed]]
engine = "transformers"
versions = ["5.17.*"]
checks = ["invalid-parameters"]
behaviour = "unknown field 422 (FastAPI detail); negative max_tokens, wrong types, \
unknown model 500; temperature -1 ignored (200)"
[[observed]]
engine = "transformers"
versions = ["5.17.*"]
checks = ["recovery", "recovery-after-corrupt-media"]
behaviour = "after a 500 it resets the keep-alive connection without Connection: close"
"""


class KnownDefect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    versions: list[str] = ["*"]
    checks: list[str]
    observed_status: int | None = None
    note: str


class Observed(BaseModel):
    """A behaviour seen on a real engine release: explains a verdict, never changes it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    versions: list[str] = ["*"]
    checks: list[str]
    behaviour: str


class EngineProfile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    modes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    load: dict[str, Any] = Field(default_factory=dict)
    corrupt_media_status: int = 400


class EngineConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    engines: dict[str, EngineProfile]
    known_defects: list[KnownDefect] = []
    observed: list[Observed] = []

    def observed_for(self, engine: str, version: str | None, check: str) -> list[Observed]:
        return [o for o in self.observed if o.engine == engine and check in o.checks and
                any(p == "*" or fnmatch.fnmatch(version or "", p) for p in o.versions)]

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
        if key in ("known_defects", "observed"):
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


ENGINES = ("vllm", "sglang", "transformers", "generic")


def detect_engine(models: list[dict]) -> str:
    """vLLM and SGLang name themselves in `/v1/models` `owned_by`; `transformers serve` names
    the model's hub org there. Anything else speaking the API is `generic`."""
    for model in models:
        owner = str(model.get("owned_by", "")).lower()
        for engine in ("vllm", "sglang"):
            if engine in owner:
                return engine
    for model in models:     # transformers serve: owned_by is the hub org of the model id
        ident, owner = str(model.get("id", "")), str(model.get("owned_by", ""))
        if ident.endswith("@main") or (owner and ident.split("/", 1)[0] == owner and
                                       "/" in ident):
            return "transformers"
    return "generic"
