"""Test media made in memory: images with Pillow, video with PyAV (imported lazily), and
deliberately corrupt bytes.

Every generated file is deterministic and its ground truth is part of the value returned, so a
wrong answer can later be checked against the exact pixels sent (the record, section 10, checked
that the red PNG really was (255,0,0) before calling the model's answer wrong).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import cast

from PIL import Image, ImageDraw

COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "black": (0, 0, 0),
    "white": (255, 255, 255),
}

#: The order the test video shows its colours in.
VIDEO_ORDER = ("red", "green", "blue", "yellow")
#: Bar heights of the test chart, left to right, labelled A, B, C, D.
CHART_BARS = {"A": 3, "B": 7, "C": 5, "D": 2}


class MediaUnavailable(Exception):
    """A codec library is missing here; the check that needs it is DEFERRED, not failed."""


@dataclass(frozen=True)
class Media:
    """Bytes with their MIME type and the truth a correct answer must state."""

    name: str
    mime: str
    data: bytes
    truth: str

    @property
    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode()}"

    def content_part(self) -> dict:
        """The OpenAI content part: `image_url` for images, `video_url` (vLLM and SGLang both
        accept it) for video."""
        if self.mime.startswith("video/"):
            return {"type": "video_url", "video_url": {"url": self.data_url}}
        return {"type": "image_url", "image_url": {"url": self.data_url}}


def _encode(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    if fmt == "JPEG":
        image.save(buffer, format="JPEG", quality=95)
    else:
        image.save(buffer, format="PNG")
    return buffer.getvalue()


def solid(colour: str, size: int = 224, fmt: str = "PNG") -> Media:
    image = Image.new("RGB", (size, size), COLOURS[colour])
    mime = "image/jpeg" if fmt == "JPEG" else "image/png"
    return Media(f"solid-{colour}.{fmt.lower()}", mime, _encode(image, fmt), colour)


def bordered(colour: str = "red", border: str = "black", size: int = 224,
             width: int = 24) -> Media:
    """A colour field inside a thick border: the record's control for solid-colour failures."""
    image = Image.new("RGB", (size, size), COLOURS[border])
    ImageDraw.Draw(image).rectangle([width, width, size - 1 - width, size - 1 - width],
                                    fill=COLOURS[colour])
    return Media(f"bordered-{colour}.png", "image/png", _encode(image, "PNG"), colour)


def chart(bars: dict[str, int] | None = None, size: int = 256) -> Media:
    """A bar chart on white with labelled bars; the truth is the label of the tallest bar."""
    bars = dict(bars or CHART_BARS)
    image = Image.new("RGB", (size, size), COLOURS["white"])
    draw = ImageDraw.Draw(image)
    base = size - 32
    unit = (base - 16) // max(bars.values())
    slot = size // len(bars)
    draw.line([(8, base), (size - 8, base)], fill=COLOURS["black"], width=2)
    for i, (label, height) in enumerate(bars.items()):
        left = i * slot + slot // 4
        right = left + slot // 2
        draw.rectangle([left, base - height * unit, right, base - 1], fill=(40, 90, 200))
        draw.text((left + slot // 4 - 4, base + 8), label, fill=COLOURS["black"])
    tallest = max(bars, key=lambda k: bars[k])
    return Media("chart.png", "image/png", _encode(image, "PNG"), tallest)


def sized_image(size: int) -> Media:
    """A load-test image of a given edge length (content is irrelevant, size drives tokens)."""
    image = Image.new("RGB", (size, size), (90, 140, 200))
    ImageDraw.Draw(image).ellipse([size // 4, size // 4, 3 * size // 4, 3 * size // 4],
                                  fill=(250, 200, 40))
    return Media(f"load-{size}.png", "image/png", _encode(image, "PNG"), "")


def colour_video(order: tuple[str, ...] = VIDEO_ORDER, *, size: int = 224,
                 frames_per_colour: int = 8, fps: int = 4) -> Media:
    """An MP4 (MPEG-4 part 2, like the record's probe) whose frames change colour in `order`."""
    try:
        import av  # noqa: PLC0415 - optional "media" extra, imported only when video is needed
    except ImportError as exc:
        raise MediaUnavailable(f"PyAV is not installed (pip install 'imagekit[media]'): {exc}") \
            from None
    buffer = io.BytesIO()
    with av.open(buffer, mode="w", format="mp4") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        stream.bit_rate = 400_000
        for colour in order:
            frame = av.VideoFrame.from_image(Image.new("RGB", (size, size), COLOURS[colour]))
            for _ in range(frames_per_colour):
                for packet in stream.encode(frame):
                    container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return Media("colours.mp4", "video/mp4", buffer.getvalue(), ",".join(order))


def corrupt_png() -> Media:
    """A PNG signature and IHDR tag followed by bytes no decoder accepts."""
    data = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
    return Media("corrupt.png", "image/png", data, "")


def corrupt_mp4() -> Media:
    """An `ftyp` box that claims MP4, then garbage instead of `moov`/`mdat`."""
    data = b"\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2" + bytes(range(255, -1, -1)) * 8
    return Media("corrupt.mp4", "video/mp4", data, "")


def pixel_census(data: bytes, limit: int = 4) -> list[tuple[int, tuple[int, int, int]]]:
    """The most common RGB values of encoded image bytes: evidence that the pixels sent are the
    pixels meant (the record checked its red PNG really was (255,0,0) before judging answers)."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    # an RGB image's colours are (r, g, b) tuples; PIL annotates every mode's at once
    colours = cast("list[tuple[int, tuple[int, int, int]]]",
                   image.getcolors(image.width * image.height) or [])
    return sorted(colours, reverse=True)[:limit]


def dominant_colour(rgb: tuple[int, int, int]) -> str:
    """Nearest named colour; used to check the pixels sent are the pixels meant."""
    return min(COLOURS, key=lambda name: sum((a - b) ** 2
                                             for a, b in zip(COLOURS[name], rgb, strict=True)))
