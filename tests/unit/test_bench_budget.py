"""The promote benchmark's reachability figure: the client CPU that would still meet the goal
beside both registries, at the parallel efficiency crane's own round shows."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "bench_promote.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_promote", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_budget_from_this_machines_figures_is_below_any_verifying_client(bench) -> None:
    # an idle run: both registries 2.29 s of CPU, crane 0.677 s in 2.00 s on 2 cores
    cpu = {"crane_dst_registry": 2.02, "crane_src_registry": 0.27, "crane": 0.677}
    budget = bench.client_budget(cpu, crane_s=2.00, cpus=2)
    assert budget["registries_cpu_s"] == pytest.approx(2.29)
    assert budget["parallel_efficiency"] == pytest.approx(2.967 / 4, abs=1e-3)
    # 0.8 x 2.00 s x 2 cores x 0.742 - 2.29 s: less than hashing 317 MB once (~0.2 s)
    assert budget["client_cpu_budget_s"] == pytest.approx(0.084, abs=0.002)


def test_budget_grows_when_the_registries_are_cheap(bench) -> None:
    # a machine where the registries cost little: the goal leaves a client real room
    cpu = {"crane_dst_registry": 0.15, "crane_src_registry": 0.05, "crane": 0.6}
    budget = bench.client_budget(cpu, crane_s=0.5, cpus=8)
    assert budget["parallel_efficiency"] == pytest.approx(0.8 / 4.0)
    assert budget["client_cpu_budget_s"] == pytest.approx(0.8 * 0.5 * 8 * 0.2 - 0.2)
    assert budget["client_cpu_budget_s"] > 0.4
