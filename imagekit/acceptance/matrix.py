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

docs/reference/acceptance-matrix.md documents every field; the workload shapes (burstiness,
warm-up, datasets, traces, multi-turn, chosen percentiles, saturation) follow vLLM bench serve,
GuideLLM and AIPerf where those define them.
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    field_validator,
    model_validator,
)

from imagekit.acceptance import datasets
from imagekit.acceptance.models import Dataset, Modality, RoundSpec, Saturation, Slo
from imagekit.errors import InvalidInput


class Expectations(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    max_errors: int = Field(0, ge=0)
    exact_output_tokens: bool = True
    input_tolerance: float = Field(0.35, ge=0)


class MatrixBlock(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    concurrency: list[int] = Field(min_length=1)
    #: required without a dataset; with one the prompts are the dataset's
    input_tokens: list[int] | None = Field(None, min_length=1)
    #: required without a dataset; with one, absent means the dataset's lengths
    output_tokens: list[int] | None = Field(None, min_length=1)
    modality: list[Modality] = ["text"]
    requests_per_concurrency: int = Field(4, ge=1)
    min_requests: int = Field(1, ge=1)
    #: requests of a round; with a dataset, how many of its entries (in order, from the start
    #: again past its end); unset: all of them
    requests: int | None = Field(None, ge=1)
    #: open-loop arrival rates (requests/s); each replaces the concurrency levels
    rate: list[PositiveFloat] | None = None
    #: gamma shape of the inter-arrival times at `rate` (vLLM --burstiness); 1 is Poisson
    burstiness: float = Field(1.0, gt=0)
    #: requests sent before each round's clock starts, in no figure or count
    warmup_requests: int = Field(0, ge=0)
    dataset: Dataset | None = None
    #: this block's SLOs (replaces the matrix-wide [slo])
    slo: Slo | None = None

    @model_validator(mode="after")
    def _shapes_fit(self) -> MatrixBlock:
        if self.burstiness != 1 and not self.rate:
            raise ValueError("burstiness shapes the arrivals at a rate: give rate too")
        data = self.dataset
        if data is None:
            if self.input_tokens is None or self.output_tokens is None:
                raise ValueError("input_tokens and output_tokens are required without a "
                                 "dataset")
            return self
        if self.input_tokens is not None:
            raise ValueError("input_tokens has no meaning with a dataset: the prompts are the "
                             "dataset's")
        if self.modality != ["text"]:
            raise ValueError("a dataset block sends text only: modality must be [\"text\"]")
        if data.format == "trace" and (self.rate or self.burstiness != 1):
            raise ValueError("a trace sets its own send times: no rate or burstiness")
        if data.multi_turn and data.format != "sharegpt":
            raise ValueError("multi_turn needs a sharegpt dataset (conversations)")
        if data.output_column and data.format != "jsonl":
            raise ValueError("output_column is for jsonl datasets")
        return self


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
    #: seeds every round's arrivals and random prompts (with the round's index)
    seed: int = 0
    #: percentiles reported besides p50/p90/p99 (vLLM --metric-percentiles), each in (0, 100]
    percentiles: list[float] = []
    #: when an open-loop round counts as past saturation (its goodput is then not judged)
    saturation: Saturation = Saturation()
    matrix: list[MatrixBlock] = Field(min_length=1)

    @field_validator("percentiles")
    @classmethod
    def _percentiles_in_range(cls, value: list[float]) -> list[float]:
        bad = [p for p in value if not 0 < p <= 100]
        if bad:
            raise ValueError(f"percentiles must be in (0, 100], got {bad[0]:g}")
        return sorted(set(value))

    def rounds(self) -> list[RoundSpec]:
        out: list[RoundSpec] = []
        for block in self.matrix:
            slo = block.slo or self.slo
            trace = block.dataset is not None and block.dataset.format == "trace"
            loads: list[tuple[int, float | None]] = (
                [(max(block.concurrency), r) for r in block.rate] if block.rate else
                [(max(block.concurrency), None)] if trace else
                [(c, None) for c in block.concurrency])
            inputs: list[int | None] = [None]
            outputs: list[int | None] = [None]
            if block.input_tokens:
                inputs = [*block.input_tokens]
            if block.output_tokens:
                outputs = [*block.output_tokens]
            for modality, (conc, rate), inp, outp in itertools.product(
                    block.modality, loads, inputs, outputs):
                if block.dataset is not None:
                    found = datasets.entries(block.dataset).entries
                    used = block.requests or len(found)
                    requests = sum(len(found[k % len(found)].turns) for k in range(used))
                else:
                    requests = block.requests or max(block.min_requests,
                                                     conc * block.requests_per_concurrency)
                out.append(RoundSpec(
                    index=len(out) + 1, concurrency=conc, input_tokens=inp,
                    output_tokens=outp, modality=modality, requests=requests, rate=rate,
                    slo=slo, burstiness=block.burstiness, seed=self.seed,
                    warmup_requests=block.warmup_requests, percentiles=self.percentiles,
                    dataset=block.dataset,
                    saturation=self.saturation if rate or trace else None))
        return out


def load_matrix(path: Path) -> Matrix:
    """The matrix, its datasets read and checked (relative paths are the matrix file's)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read load matrix: {exc}", where=str(path)) from None
    try:
        matrix = Matrix.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        raise InvalidInput(f"load matrix invalid: {message} at "
                           f"{'.'.join(map(str, first['loc']))}", where=str(path)) from None
    blocks = []
    for n, block in enumerate(matrix.matrix):
        if block.dataset is not None:
            dataset, loaded = datasets.resolve(block.dataset, Path(path).resolve().parent)
            if block.output_tokens is None and not loaded.has_output_lengths:
                raise InvalidInput(f"load matrix invalid: the dataset gives no output length "
                                   f"for every request: set output_tokens at matrix.{n}",
                                   where=str(path))
            if dataset.format == "trace" and (block.requests or 0) > len(loaded.entries):
                raise InvalidInput(f"load matrix invalid: a trace is replayed once, on its own "
                                   f"times: requests may be at most its {len(loaded.entries)} "
                                   f"rows at matrix.{n}.requests", where=str(path))
            block = block.model_copy(update={"dataset": dataset})
        blocks.append(block)
    return matrix.model_copy(update={"matrix": blocks})
