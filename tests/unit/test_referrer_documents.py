"""The bounded referrer documents (imagekit/oci/referrers.py) and the wall clock of registry
calls (imagekit/registry/retry.py), without a registry. The processes of the round-2 sweep
(tests/registry/test_bad_input_sweep_round2.py) show the same through the CLI."""

from __future__ import annotations

import json
import time

import pytest

from imagekit.oci.referrers import (MAX_ENTRIES, MAX_LISTED, RegistryDocumentError, dedupe,
                                    parse_index, parse_manifest)
from imagekit.registry.retry import RetryPolicy, wall_clock, wall_left

D = "sha256:" + "a" * 64
WHERE = "reg.example/app referrers of " + D


def _entry(digest: str = D, **extra: object) -> dict:
    return {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest,
            "size": 100, **extra}


@pytest.mark.parametrize("body,words", [
    ({"manifests": "abc"}, "valid list"),
    ({"manifests": [1, 2]}, "manifests.0"),
    ({"manifests": [None]}, "manifests.0"),
    ({"manifests": [_entry(annotations=["a"])]}, "annotations"),
    ({"manifests": [_entry(annotations={"dev.sigstore.bundle.predicateType": {"x": 1}})]},
     "predicateType"),
    ({"manifests": [_entry(digest="sha256:12")]}, "digest"),
    ({"manifests": [_entry(size="12")]}, "size"),
    ({"manifests": [_entry()] * (MAX_LISTED + 1)}, "at most"),
    ([1, 2], "JSON list"),
])
def test_a_hostile_index_is_one_line_naming_the_document(body: object, words: str) -> None:
    with pytest.raises(RegistryDocumentError) as caught:
        parse_index(json.dumps(body).encode(), WHERE)
    line = caught.value.one_line()
    assert words in line and WHERE in line and "\n" not in line, line


@pytest.mark.parametrize("body,words", [
    ([1, 2], "JSON list"),
    ({"layers": [1]}, "layers.0"),
    ({"layers": [{"mediaType": "x", "digest": D, "size": "12"}]}, "size"),
    ({"layers": [{"mediaType": "x", "digest": D, "size": 1 << 40}]}, "size"),
    ({"subject": "sha256:x"}, "subject"),
    ({"annotations": ["a"]}, "annotations"),
])
def test_a_hostile_referrer_manifest_is_refused(body: object, words: str) -> None:
    with pytest.raises(RegistryDocumentError) as caught:
        parse_manifest(json.dumps(body).encode(), "reg.example/app@" + D)
    assert words in caught.value.one_line()


def test_a_good_index_parses_and_dedupes() -> None:
    """The check can pass: a well-formed index, one referrer listed 2,000 times, is one."""
    index = parse_index(json.dumps({"manifests": [_entry(annotations={"a": "b"})] * 2000}),
                        WHERE)
    unique = dedupe(list(index.manifests), WHERE)
    assert [e.dump()["digest"] for e in unique] == [D]
    assert unique[0].dump()["annotations"] == {"a": "b"}


def test_too_many_distinct_entries_are_refused() -> None:
    entries = [_entry("sha256:" + f"{i:064x}") for i in range(MAX_ENTRIES + 1)]
    index = parse_index(json.dumps({"manifests": entries}), WHERE)
    with pytest.raises(RegistryDocumentError, match="distinct"):
        dedupe(list(index.manifests), WHERE)


def test_the_wall_clock_cuts_every_budget() -> None:
    budget = RetryPolicy(deadline=30).budget("x")
    assert budget.remaining() > 29 and wall_left() is None
    with wall_clock(2):
        assert 1.5 < budget.remaining() <= 2
        budget.progress()  # progress restarts the deadline, never the wall clock
        assert budget.remaining() <= 2
        with wall_clock(10):  # the earliest wall wins
            assert budget.remaining() <= 2
    assert wall_left() is None and budget.remaining() > 29


def test_a_wall_clock_ends_a_retry_loop() -> None:
    budget = RetryPolicy(deadline=30, wait_initial=0.05, wait_max=0.05, wait_jitter=0,
                         attempts=1000).budget("x")

    from imagekit.registry import retry

    started = time.monotonic()
    with wall_clock(0.5):
        while True:
            decision = budget(retry.RetryableStatus.__new__(retry.RetryableStatus))
            if decision is False:
                break
            time.sleep(decision)
    assert time.monotonic() - started < 1.5
    assert "own deadline" in (budget.gave_up or "")
