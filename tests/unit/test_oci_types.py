"""Digest and reference parsing: property tests plus the malformed cases a user will type."""

from __future__ import annotations

import hashlib
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imagekit.errors import InvalidDigest, InvalidReference
from imagekit.oci import Digest, ImageIndex, ImageReference, Platform, parse_manifest
from imagekit.oci import mediatypes as mt

hex64 = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
component = st.from_regex(r"\A[a-z0-9]{1,8}(?:[._-][a-z0-9]{1,8}){0,2}\Z")
tag = st.from_regex(r"\A[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}\Z")


@given(hex64)
def test_digest_round_trips_and_compares_by_value(hex_part: str) -> None:
    digest = Digest.parse(f"sha256:{hex_part}")
    assert str(digest) == f"sha256:{hex_part}"
    assert digest == Digest("sha256", hex_part)
    assert hash(digest) == hash(Digest.parse(str(digest)))


@given(st.binary(max_size=256))
def test_digest_of_bytes_matches_hashlib(data: bytes) -> None:
    digest = Digest.of_bytes(data)
    assert digest.hex == hashlib.sha256(data).hexdigest()
    assert digest.matches(data)
    assert not digest.matches(data + b"x")


@pytest.mark.parametrize("text", [
    "", "sha256", "sha256:", ":abc", "sha256:abc", "md5:" + "a" * 32,
    "sha256:" + "A" * 64, "sha256:" + "g" * 64, "sha256:" + "a" * 65, "SHA256:" + "a" * 64,
])
def test_malformed_digests_get_a_clear_error(text: str) -> None:
    with pytest.raises(InvalidDigest) as info:
        Digest.parse(text)
    assert info.value.one_line()
    assert "\n" not in info.value.one_line()


@given(st.text(max_size=80))
def test_any_text_either_parses_or_raises_invalid_digest(text: str) -> None:
    try:
        digest = Digest.parse(text)
    except InvalidDigest:
        return
    assert str(digest) == text


@given(st.lists(component, min_size=2, max_size=4), st.none() | tag, st.none() | hex64)
def test_reference_round_trips_with_explicit_registry(path, maybe_tag, maybe_hex) -> None:
    text = "127.0.0.1:5001/" + "/".join(path)
    if maybe_tag:
        text += f":{maybe_tag}"
    if maybe_hex:
        text += f"@sha256:{maybe_hex}"
    ref = ImageReference.parse(text)
    assert str(ref) == text
    assert ref.registry == "127.0.0.1:5001"
    assert ref.repository == "/".join(path)
    assert ref.tag == maybe_tag
    assert ImageReference.parse(str(ref)) == ref


@given(st.text(alphabet=string.printable, max_size=60))
def test_any_text_either_parses_or_raises_invalid_reference(text: str) -> None:
    try:
        ref = ImageReference.parse(text)
    except InvalidReference as exc:
        assert "\n" not in exc.one_line()
        return
    assert ImageReference.parse(str(ref)) == ref


@pytest.mark.parametrize("text,expected", [
    ("ubuntu", "docker.io/library/ubuntu"),
    ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
    ("lmsysorg/sglang:v0.5", "docker.io/lmsysorg/sglang:v0.5"),
    ("index.docker.io/vllm/vllm-openai", "docker.io/vllm/vllm-openai"),
    ("docker.io/busybox", "docker.io/library/busybox"),
    ("localhost/foo", "localhost/foo"),
    ("localhost:5000/foo/bar:1", "localhost:5000/foo/bar:1"),
])
def test_docker_hub_normalisation(text: str, expected: str) -> None:
    assert str(ImageReference.parse(text)) == expected


def test_with_digest_pins_and_drops_the_tag() -> None:
    ref = ImageReference.parse("127.0.0.1:5001/sglang:fixed")
    pinned = ref.with_digest("sha256:" + "ab" * 32)
    assert str(pinned) == "127.0.0.1:5001/sglang@sha256:" + "ab" * 32
    assert pinned.identifier == "sha256:" + "ab" * 32
    assert ref.identifier == "fixed"


@pytest.mark.parametrize("text", [
    "", " ubuntu", "Ubuntu", "repo:", "repo:-bad", "repo@sha256:short", "a//b",
    "127.0.0.1:5001/", "repo:tag@md5:" + "a" * 32, "reg.io/UPPER/x", "a" * 300,
])
def test_malformed_references_get_a_clear_error(text: str) -> None:
    with pytest.raises(InvalidReference):
        ImageReference.parse(text)


def test_index_selects_platform_and_skips_attestations() -> None:
    amd = "sha256:" + "1" * 64
    att = "sha256:" + "2" * 64
    arm = "sha256:" + "3" * 64
    index = parse_manifest(
        ('{"schemaVersion":2,"mediaType":"%s","manifests":['
         '{"mediaType":"%s","digest":"%s","size":1,"platform":{"os":"unknown","architecture":"unknown"},'
         '"annotations":{"vnd.docker.reference.type":"attestation-manifest"}},'
         '{"mediaType":"%s","digest":"%s","size":1,"platform":{"os":"linux","architecture":"arm64","variant":"v8"}},'
         '{"mediaType":"%s","digest":"%s","size":1,"platform":{"os":"linux","architecture":"amd64"}}]}'
         % (mt.OCI_INDEX, mt.OCI_MANIFEST, att, mt.OCI_MANIFEST, arm, mt.OCI_MANIFEST, amd)).encode())
    assert isinstance(index, ImageIndex)
    assert str(index.select().digest) == amd
    assert str(index.select(Platform.parse("linux/arm64")).digest) == arm
    assert str(index.select(Platform.parse("linux/arm64/v8")).digest) == arm
    assert len(index.image_entries()) == 2
