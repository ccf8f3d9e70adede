"""The engine's serve command, built from the same variables `manifests/launch.sh` reads.

`launch.sh` runs inside the engine image (no imagekit there), so it is plain bash; this module
is the same rules in Python for `imagekit serve-command` and for rendering the engine Pod. A
test runs both and compares the argv, so the two cannot drift apart.

DISABLE_PIECEWISE_CUDA_GRAPH defaults to on: in the record the piecewise (prefill) CUDA graphs
added 42 shape buckets after an already 26-minute start and pushed it past the startupProbe.
For SGLang it maps to `--cuda-graph-backend-prefill=disabled` (the current flag; the old
`--disable-piecewise-cuda-graph` is deprecated and only mapped onto it). For vLLM the equivalent
is to capture full CUDA graphs for decode only.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import PurePosixPath

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from imagekit.errors import InvalidInput

SGLANG_PREFILL_GRAPH_OFF = "--cuda-graph-backend-prefill=disabled"
VLLM_DECODE_ONLY_GRAPHS = '--compilation-config={"cudagraph_mode":"FULL_DECODE_ONLY"}'


class Engine(StrEnum):
    SGLANG = "sglang"
    VLLM = "vllm"


DEFAULT_PORT = {Engine.SGLANG: 30000, Engine.VLLM: 8000}


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
    def from_env(cls, env: Mapping[str, str], extra_args: tuple[str, ...] = ()) -> "ServeConfig":
        """Read launch.sh's variables (ENGINE, MODEL_PATH, TP, MAX_CONTEXT, MAX_REQUESTS,
        DISABLE_PIECEWISE_CUDA_GRAPH, HOST, PORT, SERVED_MODEL_NAME); unset means default."""
        names = {"ENGINE": "engine", "MODEL_PATH": "model_path", "TP": "tp",
                 "MAX_CONTEXT": "max_context", "MAX_REQUESTS": "max_requests",
                 "HOST": "host", "PORT": "port", "SERVED_MODEL_NAME": "served_model_name"}
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
    def build(cls, **values: object) -> "ServeConfig":
        """Validate, turning pydantic's error into one InvalidInput line."""
        try:
            return cls(**values)  # type: ignore[arg-type]
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"])
            raise InvalidInput(f"bad serve setting {field}: {first['msg']}",
                               where=f"{field}={first.get('input')!r}"[:120]) from None


def serve_argv(config: ServeConfig) -> list[str]:
    """The argv the engine container runs; no shell involved."""
    port = str(config.effective_port)
    if config.engine is Engine.SGLANG:
        argv = ["python3", "-m", "sglang.launch_server",
                "--model-path", config.model_path,
                "--tp-size", str(config.tp),
                "--context-length", str(config.max_context),
                "--max-running-requests", str(config.max_requests),
                "--host", config.host, "--port", port]
        if config.served_model_name:
            argv += ["--served-model-name", config.served_model_name]
        if config.disable_piecewise_cuda_graph:
            argv.append(SGLANG_PREFILL_GRAPH_OFF)
    else:
        argv = ["vllm", "serve", config.model_path,
                "--tensor-parallel-size", str(config.tp),
                "--max-model-len", str(config.max_context),
                "--max-num-seqs", str(config.max_requests),
                "--host", config.host, "--port", port]
        if config.served_model_name:
            argv += ["--served-model-name", config.served_model_name]
        if config.disable_piecewise_cuda_graph:
            argv.append(VLLM_DECODE_ONLY_GRAPHS)
    return argv + list(config.extra_args)


def readiness_path(engine: Engine) -> str:
    """Both engines answer /health once the API serves; used by the exec readinessProbe."""
    return "/health"
