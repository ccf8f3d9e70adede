"""Load matrices as data (TOML): blocks of concurrency x input length x output length x modality,
expanded into numbered rounds, with the expectations each round is checked against.

    name = "vllm-main"
    [expect]
    max_errors = 0                 # per round
    exact_output_tokens = true     # completion tokens == requests x output_tokens (ignore_eos)
    input_tolerance = 0.35         # text rounds: prompt tokens within ±35 % of the target
    [[matrix]]
    concurrency = [1, 8, 32]
    input_tokens = [1024, 8192]
    output_tokens = [256]
    modality = ["text"]
    requests_per_concurrency = 4   # requests in a round = max(min_requests, c x this)
    min_requests = 8
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError

from imagekit.acceptance.models import Modality, RoundSpec, Slo
from imagekit.errors import InvalidInput


class Expectations(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_errors: int = Field(0, ge=0)
    exact_output_tokens: bool = True
    input_tolerance: float = Field(0.35, ge=0)


class MatrixBlock(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: list[int] = Field(min_length=1)
    input_tokens: list[int] = Field(min_length=1)
    output_tokens: list[int] = Field(min_length=1)
    modality: list[Modality] = ["text"]
    requests_per_concurrency: int = Field(4, ge=1)
    min_requests: int = Field(1, ge=1)
    requests: int | None = Field(None, ge=1)
    #: open-loop Poisson arrival rates (requests/s); each replaces the concurrency levels
    rate: list[PositiveFloat] | None = None
    #: this block's SLOs (replaces the matrix-wide [slo])
    slo: Slo | None = None


class Matrix(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    model: str | None = None
    image_size: int = Field(448, ge=16)
    #: before the first image/video round, ask what the load input shows; a wrong answer is
    #: its own FAIL and that modality's rounds are left out (DEFERRED), as in record s.10
    semantic_warmup: bool = True
    request_fields: dict[str, Any] = {}
    expect: Expectations = Expectations()
    slo: Slo | None = None
    #: regression against the previously accepted digest of the same image: goodput may drop
    #: by this share (absolute), TTFT/TPOT/E2E p50 and p99 may grow by this share (relative)
    regression_tolerance: float = Field(0.10, ge=0)
    #: coverage of the regression intervals (imagekit/stats.py), in (0, 1)
    regression_confidence: float = Field(0.90, gt=0, lt=1)
    matrix: list[MatrixBlock] = Field(min_length=1)

    def rounds(self) -> list[RoundSpec]:
        out: list[RoundSpec] = []
        for block in self.matrix:
            slo = block.slo or self.slo
            loads: list[tuple[int, float | None]] = (
                [(c, None) for c in block.concurrency] if not block.rate else
                [(max(block.concurrency), r) for r in block.rate])
            for modality, (conc, rate), inp, outp in itertools.product(
                    block.modality, loads, block.input_tokens, block.output_tokens):
                requests = block.requests or max(block.min_requests,
                                                 conc * block.requests_per_concurrency)
                out.append(RoundSpec(index=len(out) + 1, concurrency=conc, input_tokens=inp,
                                     output_tokens=outp, modality=modality, requests=requests,
                                     rate=rate, slo=slo))
        return out


def load_matrix(path: Path) -> Matrix:
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read load matrix: {exc}", where=str(path)) from None
    try:
        return Matrix.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InvalidInput(f"load matrix invalid: {first['msg']} at "
                           f"{'.'.join(map(str, first['loc']))}", where=str(path)) from None
