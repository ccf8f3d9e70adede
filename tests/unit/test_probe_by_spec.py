"""`probe NAME --spec S` probes what S and its lock say: the build whose cache key is
that spec's, not the latest build of NAME."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from imagekit.build import BuildRecord, latest_build
from imagekit.build.builder import KIND, evidence_name
from imagekit.evidence import EvidenceStore
from imagekit.results import CheckResult, Status


def _build(store: EvidenceStore, key: str, tag: str) -> BuildRecord:
    record = BuildRecord(name="sglang", profile="local", engine="sglang",
                         base="127.0.0.1:5001/base:1", cache_key=key, local_tag=tag,
                         image_id="sha256:" + key[0] * 64, seconds=1.0,
                         built=dt.datetime.now(dt.timezone.utc))
    with store.attempt(evidence_name("sglang"), KIND, profile="local", cache_key=key) as a:
        a.write_json("build.json", record)
        a.add_check(CheckResult(name="build", status=Status.PASS))
    return record


def test_the_build_of_this_spec_not_the_latest(tmp_path: Path) -> None:
    store = EvidenceStore(tmp_path / "ev")
    ours = _build(store, "a" * 64, "imagekit-local/sglang:ours")
    _build(store, "b" * 64, "imagekit-local/sglang:other-spec")  # built later, another spec
    assert latest_build("sglang", "local", store).local_tag == "imagekit-local/sglang:other-spec"
    found = latest_build("sglang", "local", store, cache_key="a" * 64)
    assert found is not None and found.local_tag == ours.local_tag
    assert latest_build("sglang", "local", store, cache_key="c" * 64) is None
