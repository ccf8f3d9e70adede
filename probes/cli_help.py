"""The engine's CLI builds its arguments: sglang `python3 -m sglang.launch_server --help`;
vllm `vllm serve --help=all`.

When vLLM fails the zero-GPU way ("Failed to infer device type"), that failure is KEPT and the
argument parsing is re-checked with the CPU platform selected explicitly (vLLM's pinned internal
`vllm.platforms._current_platform`); both passing gives CPU_PASS_GPU_CLI_DEFERRED: only the CPU
side is proven, the GPU CLI is for the GPU phase. It is never a PASS.
"""

import importlib.util
import os
import shutil
import sys

from _common import emit, run, tail

DEVICE_ERROR = "Failed to infer device type"
CPU_RECHECK = (
    "import sys\n"
    "import vllm.platforms as platforms\n"
    "from vllm.platforms.cpu import CpuPlatform\n"
    "platforms._current_platform = CpuPlatform()\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.argv = ['vllm', 'serve', '--help=all']\n"
    "sys.exit(main())\n"
)


def sglang():
    if importlib.util.find_spec("sglang") is None:
        return emit("cli_help", "DEFERRED", "sglang is not installed in this image")
    argv = [sys.executable, "-m", "sglang.launch_server", "--help"]
    code, out, err = run(argv)
    data = {"argv": argv, "exit_code": code, "stdout_tail": tail(out), "stderr_tail": tail(err)}
    if code == 0 and "usage" in out.lower():
        return emit("cli_help", "PASS", "sglang.launch_server --help printed usage", **data)
    return emit("cli_help", "FAIL", f"sglang.launch_server --help exited {code}", **data)


def vllm():
    if importlib.util.find_spec("vllm") is None:
        return emit("cli_help", "DEFERRED", "vllm is not installed in this image")
    exe = shutil.which("vllm")
    argv = [exe, "serve", "--help=all"] if exe else \
        [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", "--help=all"]
    code, out, err = run(argv)
    first = {"argv": argv, "exit_code": code, "stdout_tail": tail(out), "stderr_tail": tail(err)}
    if code == 0 and "usage" in out.lower():
        return emit("cli_help", "PASS", "vllm serve --help=all printed usage", gpu_cli=first)
    if DEVICE_ERROR not in out + err:
        return emit("cli_help", "FAIL", f"vllm serve --help=all exited {code}", gpu_cli=first)
    code2, out2, err2 = run([sys.executable, "-c", CPU_RECHECK], env=dict(os.environ))
    second = {"exit_code": code2, "stdout_tail": tail(out2), "stderr_tail": tail(err2),
              "platform": "vllm.platforms.cpu.CpuPlatform (pinned internal interface)"}
    if code2 == 0 and "usage" in out2.lower():
        return emit("cli_help", "DEFERRED",
                    "CPU_PASS_GPU_CLI_DEFERRED: `vllm serve --help=all` failed with "
                    f"'{DEVICE_ERROR}' (kept); argument parsing passed on the CPU platform",
                    phase_status="CPU_PASS_GPU_CLI_DEFERRED", gpu_cli=first, cpu_cli=second)
    return emit("cli_help", "FAIL", f"'{DEVICE_ERROR}', and the CPU-platform re-check exited "
                f"{code2} too", gpu_cli=first, cpu_cli=second)


def main(engine):
    if engine == "sglang":
        return sglang()
    if engine == "vllm":
        return vllm()
    return emit("cli_help", "ERROR", f"unknown engine {engine!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
