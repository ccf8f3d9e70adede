"""`standins build --layers 63` as the rehearsal uses it, on the real engine:
the padded SGLang stand-in is pinned for the spec's own tag, and the fixed image builds on it.
Before the lock said which tag it stands for, `images verify` refused the padded base with
"has no digest in the lock" (found by running `rehearsal --layers 63` end to end)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imagekit.build import build_image
from imagekit.spec import load_lock, load_spec, resolve_image
from imagekit.standins import build_standins

ASSETS = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.docker, pytest.mark.registry, pytest.mark.slow]


def test_the_fixed_sglang_image_builds_on_a_63_layer_stand_in(engine, session_store, standins,
                                                              tmp_path: Path) -> None:
    root = tmp_path / "dockerfiles"          # a copy: the session's own lock stays unpadded
    shutil.copytree(ASSETS / "dockerfiles", root, ignore=shutil.ignore_patterns(
        "images.local.lock"))
    spec = load_spec(root / "images.toml")
    records = build_standins(spec, engine, session_store, "local", layers=63,
                             layers_for=frozenset({"sglang"}))
    padded = {r.image: r for r in records}
    assert padded["sglang"].layers >= 63 and padded["vllm"].layers == standins["vllm"].layers
    lock = load_lock(spec.lock_path("local"), "local")
    assert str(lock.bases["sglang"].tag).endswith("-layers63")
    assert lock.bases["sglang"].padded_from == spec.image("sglang").base["local"]
    assert lock.bases["vllm"].padded_from is None

    image = resolve_image(spec, "sglang", "local")
    assert image.base_digest == padded["sglang"].digest
    built = build_image(spec, "sglang", engine, session_store, profile="local", push=False)
    assert built.base.identifier == str(padded["sglang"].digest)    # FROM the padded digest
    assert len(engine.inspect(built.local_tag).diff_ids) > padded["sglang"].layers
