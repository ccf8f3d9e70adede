"""Stand-in MODELS beside the stand-in bases: tiny random-weight models built offline.

No model can be downloaded here, yet acceptance must meet a real engine serving a real model.
These models speak the protocol for real (a trained byte-level BPE tokenizer, a chat template,
weights of the right shapes) and answer nonsense: a run on one judges the protocol and DEFERS
every semantic check ("stand-in model: answers are not judged").

- `text`: Llama, hidden 128, 2 layers, 2 heads of 64, 32,768-token context (the needle case).
- `llava`: a CLIP vision tower over 32x32 images feeding that Llama.

Each is a Hugging Face cache (``hub/models--imagekit-standin--<name>/refs/main`` and
``snapshots/<rev>/``) under ``/var/lib/imagekit/models/<key>/``, where `key` hashes everything
that goes in (builder source, parameters, corpus bytes, transformers release): same inputs, same
directory, built once. The snapshot carries ``imagekit-standin.json`` (``random_weights: true``)
and a model card saying so; the served name's org ``imagekit-standin`` is how a client that
sees only HTTP knows it too.

The builder (`build_model.py`) runs with an engine venv's python (torch + transformers live
there, never in imagekit's own environment).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from imagekit.errors import InfraError

ORG = "imagekit-standin"
MARKER = "imagekit-standin.json"
#: Where stand-in models are cached unless the caller passes `root` (the CLI passes
#: IMAGEKIT_MODELS_DIR, imagekit.settings).
DEFAULT_ROOT = Path("/var/lib/imagekit/models")
BUILDER = Path(__file__).with_name("build_model.py")
TRANSFORMERS_RELEASE = "5.17.0"
#: text already on every Debian machine: the tokenizer's training corpus
CORPUS = (Path("/usr/share/common-licenses/GPL-3"), Path("/usr/share/common-licenses/Apache-2.0"))
NAMES = {"text": "llama-text-32k", "llava": "tiny-llava"}


@dataclass(frozen=True)
class StandinModel:
    kind: str
    name: str             # served name, ORG/NAME
    key: str
    hub: Path             # a HF_HUB_CACHE directory holding only this model
    snapshot: Path        # the snapshot directory (what `--model` takes)
    max_len: int


def is_standin(model_id: str | None) -> bool:
    """A served model name from the stand-in org (`transformers serve` appends `@main`)."""
    return bool(model_id) and str(model_id).split("@", 1)[0].startswith(ORG + "/")


def _key(kind: str, vocab: int, max_len: int, corpus: tuple[Path, ...]) -> str:
    digest = hashlib.sha256()
    digest.update(BUILDER.read_bytes())
    digest.update(json.dumps([kind, vocab, max_len, TRANSFORMERS_RELEASE]).encode())
    for path in sorted(corpus):
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _layout(kind: str, key: str, root: Path, max_len: int) -> StandinModel:
    name = NAMES[kind]
    hub = root / key[:16] / "hub"
    repo = hub / f"models--{ORG}--{name}"
    return StandinModel(kind=kind, name=f"{ORG}/{name}", key=key, hub=hub,
                        snapshot=repo / "snapshots" / key[:40], max_len=max_len)


def file_digests(snapshot: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(snapshot.iterdir()) if p.is_file() and p.name != MARKER}


def ensure_model(kind: str, python: Path, *, root: Path | None = None, vocab: int = 1024,
                 max_len: int = 32768, corpus: tuple[Path, ...] = CORPUS) -> StandinModel:
    """Build the stand-in model `kind` unless its cache entry is complete; idempotent."""
    if kind not in NAMES:
        raise InfraError(f"unknown stand-in model kind {kind!r}; known: {', '.join(NAMES)}")
    missing = [str(p) for p in corpus if not p.is_file()]
    if missing:
        raise InfraError(f"tokenizer corpus missing: {', '.join(missing)}")
    root = root or DEFAULT_ROOT
    model = _layout(kind, _key(kind, vocab, max_len, corpus), root, max_len)
    if (model.snapshot / MARKER).is_file():
        readable_by_all(model.hub)
        return model
    top = model.hub.parent
    top.mkdir(parents=True, exist_ok=True)
    with open(top / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (model.snapshot / MARKER).is_file():
            return model
        if model.snapshot.exists():
            shutil.rmtree(model.snapshot)
        argv = [str(python), str(BUILDER), "--kind", kind, "--out", str(model.snapshot),
                "--vocab", str(vocab), "--max-len", str(max_len)]
        for path in corpus:
            argv += ["--corpus", str(path)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
               "PYTHONHASHSEED": "0"}
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900,
                              check=False)
        if done.returncode != 0:
            raise InfraError(f"stand-in model {kind} build failed: "
                             f"{(done.stderr or done.stdout).strip()[-400:]}")
        (model.snapshot / "README.md").write_text(
            f"# {model.name} (imagekit stand-in model)\n\nRANDOM WEIGHTS. Built offline by "
            "imagekit to meet real engines in tests; it speaks the protocol and answers "
            "nonsense. Never evidence about a real model.\n")
        refs = model.snapshot.parent.parent / "refs"
        refs.mkdir(parents=True, exist_ok=True)
        (refs / "main").write_text(model.snapshot.name)
        (model.snapshot / MARKER).write_text(json.dumps(
            {"name": model.name, "kind": kind, "random_weights": True, "key": model.key,
             "max_model_len": max_len, "vocab": vocab, "files": file_digests(model.snapshot)},
            indent=1))
        readable_by_all(model.hub)
    return model


def readable_by_all(folder: Path) -> None:
    """Files 0644 and folders 0755: a model is read by Pods that run as a non-root user
    (restricted Pod Security), and a writer such as safetensors may create files 0600."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        wanted = 0o755 if path.is_dir() else 0o644
        if path.stat().st_mode & 0o777 != wanted:
            path.chmod(wanted)
