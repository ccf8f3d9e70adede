"""Generated media carry their truth in their bytes; corrupt media really are undecodable; the
needle document is deterministic and keeps key, distractors and position."""

from __future__ import annotations

import io

import av
import pytest
from PIL import Image

from imagekit.acceptance import media
from imagekit.acceptance.needle import (EXPLICIT_TEMPLATE, KEY_LABEL, NOT_FOUND, approx_tokens,
                                        make_document)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_solid_images_have_the_exact_pixels(fmt: str) -> None:
    for colour in ("red", "blue", "green"):
        item = media.solid(colour, fmt=fmt)
        image = Image.open(io.BytesIO(item.data)).convert("RGB")
        if fmt == "PNG":
            assert image.getcolors(1) == [(224 * 224, media.COLOURS[colour])]
        else:
            assert media.dominant_colour(image.getpixel((112, 112))) == colour
        assert item.content_part()["image_url"]["url"].startswith(f"data:{item.mime};base64,")


def test_bordered_and_chart_truths() -> None:
    image = Image.open(io.BytesIO(media.bordered("red").data)).convert("RGB")
    assert image.getpixel((0, 0)) == (0, 0, 0) and image.getpixel((112, 112)) == (255, 0, 0)
    assert media.chart().truth == "B" == max(media.CHART_BARS, key=media.CHART_BARS.get)


def test_video_frames_change_colour_in_the_stated_order() -> None:
    item = media.colour_video()
    assert item.content_part()["type"] == "video_url"
    with av.open(io.BytesIO(item.data)) as container:
        names = [media.dominant_colour(f.to_image().getpixel((112, 112)))
                 for f in container.decode(video=0)]
    order = [n for i, n in enumerate(names) if i == 0 or names[i - 1] != n]
    assert order == list(media.VIDEO_ORDER) == item.truth.split(",")
    assert len(names) == 8 * len(media.VIDEO_ORDER)


def test_corrupt_media_do_not_decode() -> None:
    with pytest.raises(Exception):
        Image.open(io.BytesIO(media.corrupt_png().data)).load()
    with pytest.raises(av.error.InvalidDataError):
        av.open(io.BytesIO(media.corrupt_mp4().data))
    assert media.corrupt_png().data.startswith(b"\x89PNG")
    assert media.corrupt_mp4().data[4:8] == b"ftyp"


def test_needle_document_is_deterministic_and_about_31k_tokens() -> None:
    doc = make_document(7, 0.5)
    again = make_document(7, 0.5)
    assert doc.text == again.text and doc.key == again.key
    assert 30_500 <= doc.approx_tokens <= 31_500
    lines = doc.text.split("\n")
    assert lines[doc.insertion_paragraph] == f"{KEY_LABEL} {doc.key}"
    assert doc.text.count(KEY_LABEL) == 1
    for d in doc.distractors:
        assert d.value in lines[d.paragraph] and d.value != doc.key
    assert make_document(8, 0.5).key != doc.key


def test_needle_positions_and_control() -> None:
    early, late = make_document(3, 0.1), make_document(3, 0.9)
    assert early.key == late.key and early.distractors[0].value == late.distractors[0].value
    assert early.insertion_paragraph < early.paragraphs * 0.15
    assert late.insertion_paragraph > late.paragraphs * 0.85
    control = make_document(3, 0.5, with_key=False)
    assert control.key is None and KEY_LABEL not in control.text
    assert control.judge(NOT_FOUND) == (True, "")
    assert control.judge(control.distractors[1].value)[0] is False
    assert early.judge(f"The key is {early.key}") == (True, "")
    assert early.judge(early.distractors[0].value)[0] is False
    assert early.judge(NOT_FOUND) == (False, "NOT_FOUND")


def test_approx_tokens_method() -> None:
    assert approx_tokens("验收密钥") == 4
    assert approx_tokens("abcdefgh") == 2
    assert approx_tokens("密钥 abcd") == 2 + 2
    assert approx_tokens("B717613") == 6 + 1
    prompt = make_document(1, 0.5, target_tokens=500).prompt("explicit")
    assert prompt.startswith("<document>\n") and KEY_LABEL in prompt
