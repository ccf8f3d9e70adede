"""Promote's blob schedule and its process-wide settings: no registry."""

from __future__ import annotations

import gc

import pytest

from imagekit.errors import InvalidInput
from imagekit.oci import ImageReference
from imagekit.oci.descriptor import Descriptor
from imagekit.oci.digest import Digest
from imagekit.promote.copy import largest_first, promote


def _blob(n: int, size: int) -> Descriptor:
    return Descriptor(media_type="application/vnd.oci.image.layer.v1.tar+gzip",
                      digest=Digest.of_bytes(str(n).encode()), size=size)


def test_largest_blobs_start_first_each_digest_once() -> None:
    config, small, big, mid = _blob(0, 500), _blob(1, 3 << 20), _blob(2, 150 << 20), \
        _blob(3, 20 << 20)
    order = largest_first([config, small, big, mid, small])
    assert [d.size for d in order] == [150 << 20, 20 << 20, 3 << 20, 500]
    assert len({d.digest for d in order}) == len(order) == 4


def test_ties_keep_the_manifest_order() -> None:
    a, b, c = _blob(1, 7), _blob(2, 7), _blob(3, 7)
    assert largest_first([b, a, c]) == [b, a, c]


def test_no_collection_while_blobs_move_and_back_on_after_a_failure() -> None:
    seen: list[bool] = []

    class FailingPool:
        """The source registry fails at once: promote's own clean-up must still run."""

        def get(self, registry: str):
            seen.append(gc.isenabled())
            raise InvalidInput("no such registry", where=registry)

        def close(self) -> None:
            pass

    assert gc.isenabled()
    with pytest.raises(InvalidInput):
        promote(ImageReference.parse("127.0.0.1:1/a/b:v1"), [],
                ImageReference.parse("127.0.0.1:2/a/b:v1"), pool=FailingPool())  # type: ignore[arg-type]
    assert seen == [False]  # off while promoting
    assert gc.isenabled()   # and on again afterwards
