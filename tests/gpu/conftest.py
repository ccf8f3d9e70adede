"""Fixtures for the GPU preflight tests: they run on CPUs with the gloo backend, through
torch.distributed.run exactly as on GPUs, with small sizes so the whole set stays fast."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
#: the GPU preflight package (gpu_checks/preflight), run as `python -m preflight`
PACKAGE = REPO / "gpu_checks" / "preflight"
MODULES = ("common", "fit", "stats", "state", "devices", "health", "matmul", "allreduce",
           "health_verdicts", "small", "verdicts", "table", "run", "cli")
SMALL = ["--backend", "gloo", "--max-bytes", "8K", "--check-bytes", "16K", "--matmul-n", "64"]


def load_preflight() -> ModuleType:
    """Every public name of the package's modules in one namespace (the tests read them as the
    one-file script's attributes), each module imported once as preflight.*."""
    flat = ModuleType("preflight_names")
    for name in MODULES:
        module = importlib.import_module(f"preflight.{name}")
        flat.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    flat.__dict__["stats"] = importlib.import_module("preflight.stats")
    return flat


def lay_out_mount(root: Path) -> Path:
    """A folder laid out as the Pod's ConfigMap mount is (items: preflight/<module>.py): the
    package alone, no imagekit beside it. `python -m preflight` runs from it."""
    (root / "preflight").mkdir(parents=True)
    for path in sorted(PACKAGE.glob("*.py")):
        shutil.copy(path, root / "preflight" / path.name)
    return root


def preflight_argv(nproc: int = 0) -> list[str]:
    """`python -m preflight` (nproc 0: plainly, a world of one), or under torch.distributed.run
    with `-m preflight`; run it with cwd = a mount folder."""
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    return [sys.executable, *(launcher if nproc else []), "-m", "preflight"]


@pytest.fixture(scope="session")
def preflight() -> ModuleType:
    return load_preflight()


@pytest.fixture(scope="session")
def mount(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lay_out_mount(tmp_path_factory.mktemp("mount"))


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
def runs(tmp_path_factory: pytest.TempPathFactory, mount: Path) -> dict[str, Run]:
    """Launch every scenario through torch.distributed.run (rendezvous on a free port each),
    `-m preflight` from a folder laid out as the ConfigMap mount is."""
    base = tmp_path_factory.mktemp("preflight")
    started: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    for name, (nproc, extra) in SCENARIOS.items():
        json_path = base / f"{name}.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFLIGHT_TEST_")}
        env.update(extra, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
        argv = [*preflight_argv(nproc), "--json", str(json_path), *SMALL]
        started[name] = (subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=env, cwd=mount), json_path)
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
