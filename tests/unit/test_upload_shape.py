"""A registry's upload shape as data: sizes parsed, the registries file read strictly, and what a
run learns (413 -> smaller chunks -> monolithic) learned once and recorded in words."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.errors import InvalidInput
from imagekit.registry.shape import MIB, UploadPlan, UploadShape, load_shapes, parse_size


@pytest.mark.parametrize(("text", "size"), [(4096, 4096), ("16MiB", 16 * MIB),
                                             ("10MB", 10_000_000), ("1 GiB", 1 << 30),
                                             ("512", 512)])
def test_sizes(text, size) -> None:
    assert parse_size(text) == size


def test_registries_file(tmp_path: Path) -> None:
    path = tmp_path / "registries.toml"
    path.write_text('[registries."127.0.0.1:5000"]\nmax_body = "10MB"\nimmutable_tags = true\n'
                    '[registries."ghcr.example"]\nmonolithic = true\n')
    shapes = load_shapes(path)
    assert shapes["127.0.0.1:5000"] == UploadShape(max_body=10_000_000, immutable_tags=True)
    assert shapes["ghcr.example"].monolithic


@pytest.mark.parametrize(("text", "says"), [
    ('[registries."r"]\nchunk = 5\n', "registries.r.chunk"),
    ('[registries."r"]\nmax_body = "ten"\n', "registries.r.max_body"),
    ('[registries."r"]\nchunk_size = 0\n', "registries.r.chunk_size"),
    ("registries = [\n", "not TOML"),
])
def test_bad_registries_file_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "registries.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput) as caught:
        load_shapes(path)
    assert says in caught.value.one_line() and "\n" not in caught.value.one_line()


def test_max_body_cuts_the_chunk() -> None:
    plan = UploadPlan(UploadShape(max_body=10_000_000), 16 * MIB)
    assert plan.chunk == 10_000_000 and "max body" in plan.describe()


def test_a_413_makes_chunks_smaller_then_monolithic_once() -> None:
    plan = UploadPlan(UploadShape(), 16 * MIB)
    assert plan.describe() == "chunked 16 MiB"
    assert plan.smaller(16 * MIB, 413) and plan.chunk == 4 * MIB
    assert plan.smaller(16 * MIB, 413) and plan.chunk == 4 * MIB  # another blob, same lesson
    assert plan.smaller(4 * MIB, 413) and plan.chunk == 1 * MIB
    assert not plan.smaller(1 * MIB, 413)  # nothing smaller is left: the caller goes whole
    plan.go_monolithic("HTTP 413 to a 1 MiB PATCH")
    plan.go_monolithic("again")  # learned once
    text = plan.describe()
    assert text.startswith("monolithic PUT") and text.count("monolithic PUT per blob") == 1
    assert "HTTP 413 to a 16 MiB PATCH: chunks of 4 MiB" in text


def test_immutable_tags_configured_or_learned() -> None:
    assert UploadPlan(UploadShape(immutable_tags=True), MIB).immutable_tags
    plan = UploadPlan(UploadShape(), MIB)
    assert not plan.immutable_tags
    plan.tags_refused = True
    assert plan.immutable_tags


def test_images_toml_holds_registry_shapes(tmp_path: Path) -> None:
    """`[registries."HOST"]` in images.toml: the same tables as the registries file, checked
    with the spec (a bad one fails the spec with one line, before any registry call)."""
    from imagekit.errors import SpecError
    from imagekit.spec import load_spec

    import shutil

    shipped_dir = Path(__file__).resolve().parents[2] / "dockerfiles"
    shutil.copytree(shipped_dir, tmp_path / "dockerfiles")
    shipped = (shipped_dir / "images.toml").read_text()
    spec = tmp_path / "dockerfiles" / "images.toml"
    spec.write_text(shipped + '\n[registries."127.0.0.1:5003"]\nmax_body = "10MB"\n'
                              'immutable_tags = true\n')
    loaded = load_spec(spec)
    assert loaded.registries["127.0.0.1:5003"] == UploadShape(max_body=10_000_000,
                                                              immutable_tags=True)
    spec.write_text(shipped + '\n[registries."127.0.0.1:5003"]\nmax_body = "lots"\n')
    with pytest.raises(SpecError) as caught:
        load_spec(spec)
    assert "max_body" in caught.value.one_line()
