"""Where the images of a release land: `REGISTRY[/NAMESPACE]` parsed, each source placed at
`NAMESPACE/<last component>` with its tag (by digest when it had none), and the places two
sources would share refused before any copy."""

from __future__ import annotations

import pytest

from imagekit.errors import InvalidInput
from imagekit.oci import ImageReference
from imagekit.promote.release import ReleaseImage, ReleaseTarget, check_distinct, place_hops

DIGEST = "sha256:" + "ab" * 32


def R(text: str) -> ImageReference:
    return ImageReference.parse(text)


@pytest.mark.parametrize(("given", "registry", "namespace"), [
    ("127.0.0.1:5002", "127.0.0.1:5002", ""),
    ("127.0.0.1:5002/", "127.0.0.1:5002", ""),
    ("127.0.0.1:5002/imagekit", "127.0.0.1:5002", "imagekit"),
    ("registry.example.com/team/release", "registry.example.com", "team/release"),
])
def test_a_registry_with_an_optional_namespace(given, registry, namespace):
    target = ReleaseTarget.parse(given, "--to")
    assert (target.registry, target.namespace) == (registry, namespace)


@pytest.mark.parametrize("given", ["127.0.0.1:5002/imagekit/vllm:v1",
                                   f"127.0.0.1:5002/imagekit/vllm@{DIGEST}", "imagekit",
                                   "127.0.0.1:5002/Upper", "bad host/x"])
def test_one_image_or_no_registry_is_refused(given):
    with pytest.raises(InvalidInput):
        ReleaseTarget.parse(given, "--to")


def test_each_source_lands_under_the_namespace_with_its_tag_or_digest():
    target = ReleaseTarget.parse("127.0.0.1:5003/prod", "--to")
    assert str(target.place(R("127.0.0.1:5001/imagekit/engines/vllm:v1"))) == \
        "127.0.0.1:5003/prod/vllm:v1"
    assert str(target.place(R(f"127.0.0.1:5001/imagekit/sglang@{DIGEST}"))) == \
        f"127.0.0.1:5003/prod/sglang@{DIGEST}"
    # a tag and a digest (a NAME's verified build): the tag, the digest checked at the copy
    assert str(target.place(R(f"127.0.0.1:5001/imagekit/sglang:abc@{DIGEST}"))) == \
        "127.0.0.1:5003/prod/sglang:abc"
    assert str(ReleaseTarget.parse("127.0.0.1:5003", "--to").place(R("h.io/a/b:t"))) == \
        "127.0.0.1:5003/b:t"


def _image(source: str, *targets: str) -> ReleaseImage:
    parsed = [ReleaseTarget.parse(t, "--via") for t in targets]
    via, to = place_hops(R(source), parsed[:-1], parsed[-1])
    return ReleaseImage(given=source, source=R(source), via=via, to=to, gate=False)


def test_two_sources_at_one_place_are_refused_at_any_hop():
    ok = [_image("127.0.0.1:5001/a/vllm:v1", "127.0.0.1:5002/x", "127.0.0.1:5003/y"),
          _image("127.0.0.1:5001/a/sglang:v1", "127.0.0.1:5002/x", "127.0.0.1:5003/y")]
    check_distinct(ok)
    clash = [ok[0], _image("127.0.0.1:5001/b/vllm:v1", "127.0.0.1:5002/x", "127.0.0.1:5003/y")]
    with pytest.raises(InvalidInput, match="would both land at 127.0.0.1:5002/x/vllm:v1"):
        check_distinct(clash)
    with pytest.raises(InvalidInput, match="given twice"):
        check_distinct([ok[0], ok[0]])
    # two tags of one repository land side by side: allowed
    check_distinct([_image("127.0.0.1:5001/a/vllm:v1", "127.0.0.1:5003/y"),
                    _image("127.0.0.1:5001/a/vllm:v2", "127.0.0.1:5003/y")])
