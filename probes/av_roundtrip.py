"""PyAV codec chain: 8 frames of 64x64 MPEG-4, muxed as MP4 in memory, demuxed and decoded;
frame count and width asserted → "AV_ROUNDTRIP_PASS 8". No numpy or Pillow needed.

A missing PyAV is a FAIL here: the spec only runs this probe on images that must decode video.
"""

import io
import sys

from _common import emit

FRAMES, SIZE = 8, 64


def main():
    try:
        import av
    except ImportError as exc:
        return emit("av_roundtrip", "FAIL", f"PyAV is not installed ({exc}): this image cannot "
                    "decode video", installed=False)
    version = getattr(av, "__version__", "unknown")
    try:
        buffer = io.BytesIO()
        with av.open(buffer, mode="w", format="mp4") as container:
            stream = container.add_stream("mpeg4", rate=FRAMES)
            stream.width = SIZE
            stream.height = SIZE
            stream.pix_fmt = "yuv420p"
            for index in range(FRAMES):
                frame = av.VideoFrame(SIZE, SIZE, "yuv420p")
                for plane_index, plane in enumerate(frame.planes):
                    value = (index * 29 + plane_index * 80) % 256
                    plane.update(bytes([value]) * plane.buffer_size)
                frame.pts = index
                for packet in stream.encode(frame):
                    container.mux(packet)
            for packet in stream.encode():
                container.mux(packet)
        data = buffer.getvalue()
        decoded, widths = 0, set()
        with av.open(io.BytesIO(data), mode="r") as container:
            codec = container.streams.video[0].codec_context.name
            for frame in container.decode(video=0):
                decoded += 1
                widths.add(frame.width)
    except Exception as exc:  # the codec chain itself failed: that is the finding
        return emit("av_roundtrip", "FAIL", f"round trip failed: {type(exc).__name__}: {exc}",
                    av_version=version)
    info = {"av_version": version, "frames": decoded, "widths": sorted(widths),
            "bytes": len(data), "codec": codec}
    if decoded == FRAMES and widths == {SIZE}:
        return emit("av_roundtrip", "PASS", f"AV_ROUNDTRIP_PASS {decoded}", **info)
    return emit("av_roundtrip", "FAIL", f"decoded {decoded} frame(s) of width(s) "
                f"{sorted(widths)}, expected {FRAMES} of {SIZE}", **info)


if __name__ == "__main__":
    sys.exit(main())
