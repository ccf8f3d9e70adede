"""Fixtures for the GPU preflight tests: they run on CPUs with the gloo backend, through
torch.distributed.run exactly as on GPUs, with small sizes so the whole set stays fast."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "gpu_checks" / "preflight.py"
SMALL = ["--backend", "gloo", "--max-bytes", "8K", "--check-bytes", "16K", "--matmul-n", "64"]


def load_preflight() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_preflight_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def preflight() -> ModuleType:
    return load_preflight()


@dataclass
class Run:
    nproc: int
    returncode: int
    stdout: str
    stderr: str
    record: dict[str, Any] | None
    json_path: Path


# name -> (processes, extra env); all start at once, so the set costs one run's wall time
SCENARIOS: dict[str, tuple[int, dict[str, str]]] = {
    "world1": (1, {"NCCL_NVLS_ENABLE": "0"}),
    "world2": (2, {}),
    "world4": (4, {}),
    # two independent faults on two different ranks: each check must name its own culprit
    "faults": (3, {"PREFLIGHT_TEST_WRONG_RANK": "2", "PREFLIGHT_TEST_NAN": "1"}),
    # 0 processes: the script run plainly, without the launcher, as a world of one
    "standalone_nan": (0, {"PREFLIGHT_TEST_NAN": "0"}),
}


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Launch every scenario through torch.distributed.run (rendezvous on a free port each)."""
    base = tmp_path_factory.mktemp("preflight")
    started: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    for name, (nproc, extra) in SCENARIOS.items():
        json_path = base / f"{name}.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFLIGHT_TEST_")}
        env.update(extra, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
        launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
        argv = [sys.executable, *(launcher if nproc else []), str(SCRIPT),
                "--json", str(json_path), *SMALL]
        started[name] = (subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env, cwd=REPO), json_path)
    deadline = time.monotonic() + 240
    done: dict[str, Run] = {}
    for name, (proc, json_path) in started.items():
        try:
            out, err = proc.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        record = json.loads(json_path.read_text()) if json_path.exists() else None
        done[name] = Run(SCENARIOS[name][0] or 1, proc.returncode, out, err, record, json_path)
    return done
