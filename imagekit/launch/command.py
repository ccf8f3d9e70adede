"""The engine's serve command, built from the same variables `manifests/launch.sh` reads.

`launch.sh` runs inside the engine image (no imagekit there), so it is plain bash; this module
is the same rules in Python for `imagekit serve-command` and for rendering the engine Pod. A
test runs both and compares the argv, so the two cannot drift apart.

DISABLE_PIECEWISE_CUDA_GRAPH defaults to on: in the record the piecewise (prefill) CUDA graphs
added 42 shape buckets after an already 26-minute start and pushed it past the startupProbe.
It appends ONE argument, the prefill switch, whose spelling depends on the engine version: SGLang
`--cuda-graph-backend-prefill=disabled` (0.5.23 has only this; the record's image also took the
old `--disable-piecewise-cuda-graph`, deprecated, mapped onto it), vLLM full CUDA graphs for
decode only. Which spelling an image accepts is decided by its own parser (the `serve_args`
probe, `PREFILL_SWITCHES` are the candidates in order) and recorded; a launch of that image
passes the recorded spelling as PREFILL_SWITCH (`cluster accept` does). Unset, the first
candidate is used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from imagekit.errors import InvalidInput

SGLANG_PREFILL_GRAPH_OFF = "--cuda-graph-backend-prefill=disabled"
SGLANG_PREFILL_GRAPH_OFF_OLD = "--disable-piecewise-cuda-graph"
VLLM_DECODE_ONLY_GRAPHS = '--compilation-config={"cudagraph_mode":"FULL_DECODE_ONLY"}'


class Engine(StrEnum):
    SGLANG = "sglang"
    VLLM = "vllm"


DEFAULT_PORT = {Engine.SGLANG: 30000, Engine.VLLM: 8000}
#: the spellings of the prefill switch, in order of preference (the first is the default)
PREFILL_SWITCHES = {Engine.SGLANG: (SGLANG_PREFILL_GRAPH_OFF, SGLANG_PREFILL_GRAPH_OFF_OLD),
                    Engine.VLLM: (VLLM_DECODE_ONLY_GRAPHS,)}
#: launch.sh's variables (ENGINE included), all of which `from_env` reads
LAUNCH_VARIABLES = ("ENGINE", "MODEL_PATH", "TP", "MAX_CONTEXT", "MAX_REQUESTS",
                    "DISABLE_PIECEWISE_CUDA_GRAPH", "PREFILL_SWITCH", "HOST", "PORT",
                    "SERVED_MODEL_NAME")


class ServeConfig(BaseModel):
    """Everything the serve command depends on; field names follow launch.sh's variables."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: Engine = Engine.SGLANG
    model_path: str = "/models/model"
    tp: int = Field(8, ge=1, le=64)
    max_context: int = Field(32768, ge=1)
    max_requests: int = Field(8, ge=1)
    disable_piecewise_cuda_graph: bool = True
    host: str = "0.0.0.0"
    port: int | None = Field(None, ge=1, le=65535)
    served_model_name: str | None = None
    #: the prefill switch's spelling (None: the engine's first candidate); from serve_args
    prefill_switch: str | None = Field(None, pattern=r"^--[^\s]{1,300}$")
    extra_args: tuple[str, ...] = ()

    @field_validator("model_path")
    @classmethod
    def _absolute_model_path(cls, value: str) -> str:
        if not PurePosixPath(value).is_absolute():
            raise ValueError("MODEL_PATH must be an absolute path inside the container")
        return value

    @property
    def effective_port(self) -> int:
        return self.port if self.port is not None else DEFAULT_PORT[self.engine]

    @classmethod
    def from_env(cls, env: Mapping[str, str], extra_args: tuple[str, ...] = ()) -> ServeConfig:
        """Read launch.sh's variables (`LAUNCH_VARIABLES`); unset means default."""
        names = {"ENGINE": "engine", "MODEL_PATH": "model_path", "TP": "tp",
                 "MAX_CONTEXT": "max_context", "MAX_REQUESTS": "max_requests",
                 "HOST": "host", "PORT": "port", "SERVED_MODEL_NAME": "served_model_name",
                 "PREFILL_SWITCH": "prefill_switch"}
        values: dict[str, object] = {field: env[var] for var, field in names.items()
                                     if env.get(var)}
        flag = env.get("DISABLE_PIECEWISE_CUDA_GRAPH")
        if flag not in (None, ""):
            if flag not in ("0", "1"):
                raise InvalidInput("DISABLE_PIECEWISE_CUDA_GRAPH must be 0 or 1",
                                   where=f"DISABLE_PIECEWISE_CUDA_GRAPH={flag}")
            values["disable_piecewise_cuda_graph"] = flag == "1"
        return cls.build(extra_args=extra_args, **values)

    @classmethod
    def build(cls, **values: object) -> ServeConfig:
        """Validate, turning pydantic's error into one InvalidInput line."""
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise InvalidInput(f"bad serve setting {field}: {first['msg']}",
                               where=f"{field}={first.get('input')!r}"[:120]) from None


def prefill_switch(config: ServeConfig) -> str:
    """The argument DISABLE_PIECEWISE_CUDA_GRAPH=1 appends."""
    return config.prefill_switch or PREFILL_SWITCHES[config.engine][0]


def serve_parts(config: ServeConfig) -> tuple[list[str], list[str]]:
    """(head, tail): the command is head + [prefill switch, when asked] + tail."""
    port = str(config.effective_port)
    if config.engine is Engine.SGLANG:
        head = ["python3", "-m", "sglang.launch_server",
                "--model-path", config.model_path,
                "--tp-size", str(config.tp),
                "--context-length", str(config.max_context),
                "--max-running-requests", str(config.max_requests),
                "--host", config.host, "--port", port]
    else:
        head = ["vllm", "serve", config.model_path,
                "--tensor-parallel-size", str(config.tp),
                "--max-model-len", str(config.max_context),
                "--max-num-seqs", str(config.max_requests),
                "--host", config.host, "--port", port]
    if config.served_model_name:
        head += ["--served-model-name", config.served_model_name]
    return head, list(config.extra_args)


def serve_argv(config: ServeConfig) -> list[str]:
    """The argv the engine container runs; no shell involved."""
    head, tail = serve_parts(config)
    return head + ([prefill_switch(config)] if config.disable_piecewise_cuda_graph else []) + tail


class ServeExpect(BaseModel):
    """What the engine's parse must yield for a command (the profile's settings)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tp: int
    context_length: int
    max_requests: int
    prefill_graph_disabled: bool | None = None


class ServeCommand(BaseModel):
    """One serve command for the `serve_args` probe: head + [switch] + tail, the switch's
    spelling chosen in the image by the engine's own parser."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: str
    engine: Engine
    head: list[str]
    switch: bool
    tail: list[str] = []
    expect: ServeExpect

    @classmethod
    def of(cls, label: str, config: ServeConfig) -> ServeCommand:
        head, tail = serve_parts(config)
        return cls(label=label, engine=config.engine, head=head,
                   switch=config.disable_piecewise_cuda_graph, tail=tail,
                   expect=ServeExpect(tp=config.tp, context_length=config.max_context,
                                      max_requests=config.max_requests,
                                      prefill_graph_disabled=True
                                      if config.disable_piecewise_cuda_graph else None))

    def argv(self, switch: str | None) -> list[str]:
        return self.head + ([switch or PREFILL_SWITCHES[self.engine][0]] if self.switch
                            else []) + self.tail


def serve_probe_input(engine: Engine | str, commands: list[ServeCommand]) -> str:
    """The serve_args probe's JSON argument."""
    engine = Engine(engine)
    return json.dumps({"prefill_candidates": list(PREFILL_SWITCHES[engine]),
                       "commands": [c.model_dump(mode="json", exclude={"engine"})
                                    for c in commands]}, separators=(",", ":"))


def readiness_path(engine: Engine) -> str:
    """Both engines answer /health once the API serves; used by the exec readinessProbe."""
    return "/health"
