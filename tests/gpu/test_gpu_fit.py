"""Image-to-GPU fit: one file of rules (gpu_checks/preflight/fit.py, standard library only)
that the Pod's preflight package, the in-image probe (probes/torch_arch.py, which loads it as
`_cudafit`) and the cluster precheck (imagekit/cluster/fit.py, from GPU feature discovery
labels) all load."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from preflight import fit as one_fit
from imagekit.cluster.fit import fit_checks as ik_fit_checks
from imagekit.cluster.fit import image_fit, node_facts
from imagekit.cluster.probe import probe_files
from imagekit.results import Status

REPO = Path(__file__).resolve().parents[2]
PROBES = REPO / "probes"
TORCH_CU130_ARCH = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_110", "sm_120"]


def test_the_fit_rules_are_one_file_that_every_place_loads(preflight: ModuleType,
                                                          tmp_path: Path) -> None:
    """No copy anywhere: the package, the precheck and the probe's ConfigMap all hold fit.py."""
    source = Path(one_fit.__file__).read_text()
    assert preflight.fit_checks is one_fit.fit_checks is ik_fit_checks
    defining = [p for p in [*REPO.glob("imagekit/**/*.py"), *REPO.glob("gpu_checks/**/*.py")]
                if any(isinstance(n, ast.FunctionDef) and n.name == "fit_checks"
                       for n in ast.walk(ast.parse(p.read_text())))]
    assert defining == [Path(one_fit.__file__)], defining
    imports = {n.names[0].name if isinstance(n, ast.Import) else n.module
               for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import | ast.ImportFrom)}
    assert imports <= {"__future__", "re", "typing"}, imports       # stdlib only, no relative
    files = probe_files(PROBES, [("torch_arch", ["sm_90"])])         # the cluster probe's
    assert files["_cudafit.py"] == source
    mount = tmp_path / "mount"
    mount.mkdir()
    for name, text in files.items():                                 # ConfigMap, laid out flat
        (mount / name).write_text(text)
    fake = tmp_path / "lib" / "torch"                                # a CUDA 12.4 sm_80/sm_90
    fake.mkdir(parents=True)                                         # torch, as in an image
    (fake / "__init__.py").write_text(
        "__version__ = '2.5.1+cu124'\n"
        "class version:\n    cuda = '12.4'\n"
        "class cuda:\n    @staticmethod\n    def get_arch_list():\n"
        "        return ['sm_80', 'sm_90']\n")
    env = {"PYTHONPATH": str(tmp_path / "lib"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "torch_arch.py", "sm_90", "sm_100"], cwd=mount,
                          capture_output=True, text=True, timeout=60, env=env)
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert verdict["status"] == "FAIL" and "sm_100" in verdict["detail"], done.stderr
    (mount / "_cudafit.py").unlink()                                 # nothing to load: it says so
    broken = subprocess.run([sys.executable, "torch_arch.py", "sm_90"], cwd=mount,
                            capture_output=True, text=True, timeout=60, env=env)
    assert broken.returncode != 0 and "fit" in broken.stderr, broken.stderr


# (image CUDA, arch list, compute capability, driver CUDA) -> (fit-cuda, fit-arch)
CASES = [
    ("13.0", TORCH_CU130_ARCH, (9, 0), 13000, ("PASS", "PASS")),       # an H200
    ("13.0", TORCH_CU130_ARCH, (10, 0), "13.0", ("PASS", "PASS")),     # B200 is sm_100
    ("12.4", ["sm_80"], (9, 0), "12.4", ("PASS", "FAIL")),             # sm_80 only on sm_90
    ("12.4", ["sm_80", "compute_80"], (9, 0), "12.4", ("PASS", "PASS")),  # PTX JIT
    ("13.0", ["sm_90"], (9, 0), "12.4", ("FAIL", "PASS")),             # CUDA 13 on a 12.4 driver
    ("12.8", ["sm_90"], (9, 0), "12.4", ("PASS", "PASS")),             # minor version compat
    ("12.8", ["sm_80", "compute_90"], (9, 0), "12.4", ("PASS", "FAIL")),  # no JIT of newer PTX
    ("12.8", ["sm_90a"], (9, 0), "12.8", ("PASS", "PASS")),            # arch-specific, exact
    ("12.8", ["sm_90a"], (10, 0), "12.8", ("PASS", "FAIL")),           # 'a' is not portable
    ("12.9", ["sm_100f"], (10, 3), "12.9", ("PASS", "PASS")),          # family
    ("12.8", ["sm_86"], (8, 0), "12.8", ("PASS", "FAIL")),             # SASS needs minor >=
    ("12.8", ["sm_80"], (8, 6), "12.8", ("PASS", "PASS")),
    ("12.8", ["sm_90", "compute_90"], (12, 0), "12.8", ("PASS", "PASS")),  # PTX forward
    (None, [], (9, 0), "13.0", ("DEFERRED", "FAIL")),                  # CPU torch
    ("12.8", ["sm_90"], None, None, ("DEFERRED", "DEFERRED")),         # nothing known
]


@pytest.mark.parametrize("image,arch,cc,driver,want", CASES)
def test_fit_rules(image, arch, cc, driver, want) -> None:
    got = tuple(c["status"] for c in one_fit.fit_checks(image, arch, cc, driver))
    assert got == want, [c["detail"] for c in one_fit.fit_checks(image, arch, cc, driver)]


def test_fail_details_say_why(preflight: ModuleType) -> None:
    cuda, arch = preflight.fit_checks("13.0", ["sm_80"], (9, 0), "12.4")
    assert "CUDA 13.0" in cuda["detail"] and "up to 12.4" in cuda["detail"]
    assert "sm_90" in arch["detail"] and "no kernel image" in arch["detail"]
    _, jit = preflight.fit_checks("12.8", ["compute_90"], (9, 0), "12.4")
    assert "cannot JIT-compile" in jit["detail"]


def test_version_parsing(preflight: ModuleType) -> None:
    assert preflight.parse_cuda_version(12040) == (12, 4)
    assert preflight.parse_cuda_version("13000") == (13, 0)
    assert preflight.parse_cuda_version("12.8.1") == (12, 8)
    assert preflight.parse_cuda_version("12") == (12, 0)
    assert preflight.parse_cuda_version(None) is None
    assert preflight.parse_arch("sm_100f") == ("sm", 10, 0, "f")
    assert preflight.parse_arch("compute_90") == ("compute", 9, 0, "")
    assert preflight.parse_arch("gfx90a") is None


def test_gfd_labels_give_driver_and_compute_capability() -> None:
    labels = {"nvidia.com/cuda.driver.major": "12", "nvidia.com/cuda.driver.minor": "4",
              "nvidia.com/gpu.compute.major": "9", "nvidia.com/gpu.compute.minor": "0"}
    assert node_facts(labels) == ((12, 4), (9, 0))
    newer = {"nvidia.com/cuda.driver-version.major": "13",
             "nvidia.com/cuda.driver-version.minor": "0", "nvidia.com/gpu.compute.major": "10"}
    assert node_facts(newer) == ((13, 0), (10, 0))
    assert node_facts({}) == (None, None)
    checks = image_fit("13.0", ["sm_80"], labels, "gpu-node-1")
    assert [(c.name, c.status) for c in checks] == [("fit_cuda", Status.FAIL),
                                                    ("fit_arch", Status.FAIL)]
    assert "on node gpu-node-1" in checks[0].detail
    unlabeled = image_fit("13.0", ["sm_90"], {}, "plain")
    assert {c.status for c in unlabeled} == {Status.DEFERRED}
    assert "feature discovery" in unlabeled[0].detail


def _run_probe(*args: str) -> dict:
    done = subprocess.run([sys.executable, "torch_arch.py", *args], cwd=PROBES,
                          capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_torch_arch_probe_on_this_cpu_torch_fails_and_refuses_bad_arguments() -> None:
    out = _run_probe("sm_100", "driver=12.4")
    assert out["status"] == "FAIL" and "CPU build" in out["detail"]
    assert out["data"]["targets"] == ["sm_100"] and out["data"]["driver"] == "12.4"
    assert _run_probe("sm_9")["status"] == "ERROR"


def test_torch_arch_probe_with_a_cuda_torch(tmp_path: Path) -> None:
    """A stand-in `torch` module (what a CUDA 12.4 sm_80/sm_90 build reports)."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "__version__ = '2.5.1+cu124'\n"
        "class version:\n    cuda = '12.4'\n"
        "class cuda:\n    @staticmethod\n    def get_arch_list():\n"
        "        return ['sm_80', 'sm_90']\n")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def run(*args: str) -> dict:
        done = subprocess.run([sys.executable, "torch_arch.py", *args], cwd=PROBES,
                              capture_output=True, text=True, timeout=60, check=True, env=env)
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert run()["status"] == "PASS"                       # default target sm_90
    b200 = run("sm_100")
    assert b200["status"] == "FAIL" and "sm_100" in b200["detail"]
    assert run("9.0", "driver=12.2")["status"] == "PASS"   # minor version compatibility
    assert run("sm_90", "driver=11.8")["status"] == "FAIL"  # CUDA 12 on an 11.8 driver
