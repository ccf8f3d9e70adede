"""The real SGLang 0.5.23 in the sglang stand-in, and the engines' own parsers as the judge of
the serve command imagekit launches (the `serve_args` probe), on the real stand-in images.

One `docker run` per image and plan: the probe parses every command of a plan in one process,
so a PASS, a removed flag and a deprecated one are judged by the same engine import."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.launch.command import ServeCommand, ServeConfig
from imagekit.probe import ProbePlan, run_probes
from imagekit.results import Status

REPO = Path(__file__).resolve().parents[2]
NEW, OLD = "--cuda-graph-backend-prefill=disabled", "--disable-piecewise-cuda-graph"

pytestmark = [pytest.mark.docker, pytest.mark.registry]


def _check(entry, name):
    return next(c for c in entry.checks if c.name == name)


def _commands(engine: str, **extras: tuple[str, ...]) -> list[ServeCommand]:
    """launch.sh's defaults for the engine plus each label's extra arguments."""
    return [ServeCommand.of(label, ServeConfig.from_env({"ENGINE": engine}, extra_args=args))
            for label, args in extras.items()]


def _by_label(check) -> dict[str, dict]:
    return {c["label"]: c for c in check.data["commands"]}


def test_the_sglang_standin_is_the_real_sglang_cli(verified) -> None:
    """images verify's own probes of the fixed sglang image (the stand-in plus the fix layer):
    no extra container runs."""
    _, entries = verified
    sglang = entries["sglang"]
    assert sglang.versions["sglang"] == "0.5.23" and sglang.versions["torch"].endswith("+cpu")
    cli = _check(sglang, "cli_help")
    assert cli.status is Status.PASS, cli
    # SGLang 0.5.23's own help (the tail of its 2,793 lines), not a stand-in's argparse
    assert "--enable-flashinfer-allreduce-fusion" in cli.data["stdout_tail"]
    assert "Use --cuda-graph-" in cli.data["stdout_tail"]
    assert _check(sglang, "find_spec").status is Status.PASS


def test_serve_args_passes_the_fixed_images_spec_commands(verified, session_store) -> None:
    """images verify parses each image's serve settings in the image: SGLang's launch command
    with the prefill switch its parser chose, vLLM's GPU launch and the rehearsal's accept."""
    _, entries = verified
    sglang = _check(entries["sglang"], "serve_args")
    assert sglang.status is Status.PASS, sglang.detail
    assert sglang.data["version"] == "0.5.23"
    assert sglang.data["parser"] == "sglang.srt.server_args.prepare_server_args"
    assert sglang.data["prefill_switch"] == NEW
    tried = {t["arg"]: t for t in sglang.data["prefill_tried"]}
    assert tried[NEW]["accepted"] and tried[NEW]["prefill_graph"] == "disabled"
    assert not tried[OLD]["accepted"] and tried[OLD]["unknown"] == [OLD]   # removed in 0.5.23
    launch = _by_label(sglang)["gpu-launch"]
    assert launch["argv"][-1] == NEW and launch["effective"] == {
        "tp": 8, "context_length": 32768, "max_requests": 8, "prefill_graph": "disabled",
        "prefill_graph_disabled": True, "model": "/models/model"}
    vllm = _check(entries["vllm"], "serve_args")
    assert vllm.status is Status.PASS, vllm.detail
    assert vllm.data["version"] == "0.32.0" and "CPU platform" in vllm.data["parser"]
    commands = _by_label(vllm)
    assert commands["gpu-launch"]["effective"]["prefill_graph"] == "FULL_DECODE_ONLY"
    accept = commands["rehearsal-accept"]["effective"]
    assert (accept["tp"], accept["context_length"], accept["max_requests"]) == (1, 4096, 8)
    # typed into the images-verify evidence, where cluster accept looks it up
    from imagekit.evidence.kinds import ImagesVerifyResult

    [record] = [r for r in session_store.attempts(entries["vllm"].digest, "images-verify")
                if not r.context.get("cached")][-1:]
    result = session_store.result(record)
    assert isinstance(result, ImagesVerifyResult) and result.serve_args is not None
    assert result.serve_args.passed(commands["rehearsal-accept"]["argv"]) is not None


def test_sglang_0_5_23_fails_the_old_flag_and_keeps_a_deprecation_warning(engine, verified
                                                                          ) -> None:
    _, entries = verified
    plan = ProbePlan(engine="sglang", probes=["serve_args"], serve=_commands(
        "sglang", old=(OLD,), deprecated=("--disable-cuda-graph",), fine=()))
    [check], _ = run_probes(engine, entries["sglang"].image_id, plan)
    assert check.status is Status.FAIL
    commands = _by_label(check)
    old = commands["old"]
    assert old["status"] == "FAIL" and old["unknown"] == [OLD]
    assert f"sglang 0.5.23 does not accept {OLD}" in old["detail"]
    assert f"old: sglang 0.5.23 does not accept {OLD}" in check.detail
    # a deprecated flag that still maps is a PASS, with SGLang's own warning kept
    deprecated = commands["deprecated"]
    assert deprecated["status"] == "PASS", deprecated
    assert any("'--disable-cuda-graph' is deprecated" in w for w in deprecated["warnings"])
    assert "engine warning(s) kept" in deprecated["detail"]
    assert commands["fine"]["status"] == "PASS" and not commands["fine"]["warnings"]


def test_vllm_0_32_fails_a_removed_flag_and_keeps_a_deprecation_warning(engine, verified
                                                                        ) -> None:
    _, entries = verified
    plan = ProbePlan(engine="vllm", probes=["serve_args"], serve=_commands(
        "vllm", removed=("--num-scheduler-steps", "8"),
        deprecated=("--log-config-file", "/dev/null")))
    [check], _ = run_probes(engine, entries["vllm"].image_id, plan)
    assert check.status is Status.FAIL
    commands = _by_label(check)
    removed = commands["removed"]
    assert removed["status"] == "FAIL" and "--num-scheduler-steps" in removed["unknown"]
    assert "vllm 0.32.0 does not accept --num-scheduler-steps (" in removed["detail"]
    deprecated = commands["deprecated"]
    assert deprecated["status"] == "PASS", deprecated
    assert any("--log-config-file is deprecated" in w for w in deprecated["warnings"])


def test_serve_command_with_an_unknown_flag_fails_serve_args_naming_it(verified, session_store
                                                                       ) -> None:
    """`imagekit serve-command -- --no-such-flag` is what serve_args parses, by the CLI."""
    printed = subprocess.run([sys.executable, "-m", "imagekit", "serve-command", "--",
                              "--no-such-flag"], capture_output=True, text=True, timeout=60,
                             cwd=REPO, env={"PATH": "/usr/bin:/bin", "ENGINE": "sglang"})
    assert printed.returncode == 0, printed.stderr
    done = subprocess.run([sys.executable, "-m", "imagekit", "probe", "sglang", "--probe",
                           "serve_args", "--engine-arg=--no-such-flag", "--evidence-dir",
                           str(session_store.root), "--json"], capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert done.returncode == 1, done.stderr
    [check] = json.loads(done.stdout)["checks"]
    assert check["status"] == "FAIL" and "\n" not in check["detail"]
    assert "sglang 0.5.23 does not accept --no-such-flag" in check["detail"]
    [command] = check["data"]["commands"]
    assert command["argv"] == shlex.split(printed.stdout)     # exactly the printed command


def test_an_image_without_the_engines_parser_is_deferred(engine, standins) -> None:
    from imagekit.standins import ensure_rootfs_image

    bare, _ = ensure_rootfs_image(engine, [])                  # python3, no engine
    [check], _ = run_probes(engine, str(bare), ProbePlan(engine="vllm", probes=["serve_args"]))
    assert check.status is Status.DEFERRED
    assert "vllm's own parser cannot be imported" in check.detail


def test_the_report_shows_serve_args_in_the_check_by_phase_matrix(verified, session_store
                                                                  ) -> None:
    _, entries = verified
    done = subprocess.run([sys.executable, "-m", "imagekit", "report", entries["sglang"].digest,
                           "--format", "md", "--evidence-dir", str(session_store.root)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode in (0, 1), done.stderr
    matrix = done.stdout.split("## Checks × phase", 1)[1].split("\n## ", 1)[0]
    [row] = [line for line in matrix.splitlines() if "serve_args" in line]
    assert "PASS" in row, matrix
