"""Names everywhere, the parts that need no engine: one resolver for NAME
and REF, the engine's built-in find_spec lists, and a NAME never becoming docker.io/library/…"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagekit.errors import InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.names import looks_like_name, resolve_target
from imagekit.probe.runner import plan_for
from imagekit.spec import load_spec
from imagekit.spec.engines import engine_find_spec

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/


@pytest.fixture(scope="module")
def spec():
    return load_spec(ASSETS / "dockerfiles" / "images.toml")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "imagekit", *args], capture_output=True,
                          text=True, timeout=120, check=False, cwd=REPO)


def test_names_and_references_are_told_apart() -> None:
    assert looks_like_name("sglang") and looks_like_name("vllm")
    for ref in ("127.0.0.1:5001/imagekit/sglang:x", "lmsysorg/sglang", "sglang:v1",
                "sglang@sha256:" + "0" * 64, "sha256:" + "0" * 64, ""):
        assert not looks_like_name(ref), ref


def test_sglang_builtin_find_spec_includes_nixl_and_its_entry_module() -> None:
    assert {"nixl", "nixl._api", "sglang"} <= set(engine_find_spec("sglang"))
    assert "vllm" in engine_find_spec("vllm")


def test_reference_in_a_spec_repository_gets_that_images_probes(spec) -> None:
    target = resolve_target("127.0.0.1:5001/imagekit/sglang:candidate", spec=spec)
    assert target.name == "sglang" and target.image is spec.images["sglang"]
    assert not target.by_name and str(target.reference.registry) == "127.0.0.1:5001"
    plan = plan_for(target.image)
    assert plan.probes == spec.images["sglang"].probes
    assert plan.find_spec == spec.images["sglang"].find_spec and "nixl" in plan.find_spec
    # a repository of no spec image: the engine's built-ins (nixl and nixl._api for sglang)
    other = resolve_target("127.0.0.1:5001/candidates/sgl:wrong", spec=spec)
    assert other.image is None
    assert {"nixl", "nixl._api"} <= set(plan_for(None, engine="sglang").find_spec)
    # explicit choices win
    assert plan_for(target.image, find_spec=["x"], probes=["find_spec"]).find_spec == ["x"]


def test_name_without_a_build_is_bad_input_that_says_what_to_do(spec, tmp_path) -> None:
    with pytest.raises(InvalidInput, match="no verified .*build.*imagekit build sglang"):
        resolve_target("sglang", spec=spec, store=EvidenceStore(tmp_path))
    with pytest.raises(InvalidInput, match="not an image of the spec"):
        resolve_target("nosuch", spec=spec, store=EvidenceStore(tmp_path))


@pytest.mark.parametrize("command", [
    ["cluster", "probe", "sglang"],
    ["promote", "sglang", "--to", "127.0.0.1:5129/x/y:z"],
    ["probe", "sglang"],
])
def test_a_name_is_never_looked_up_on_docker_hub(command, tmp_path) -> None:
    """Once `cluster probe sglang` took `docker.io/library/sglang` and retried an
    unresolvable host for 3 min 37 s. Now: the spec's name, one line, exit 2, at once."""
    started = time.monotonic()
    done = cli(*command, "--evidence-dir", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert "no verified (built and pushed) build" in done.stderr
    assert "docker.io" not in done.stderr and "Traceback" not in done.stderr
    assert time.monotonic() - started < 30
