"""Build fixed images from locked bases, push them to staging, keep every attempt's log."""

from imagekit.build.builder import (
    BuildFailed,
    build_image,
    build_key,
    ensure_build,
    latest_build,
)
from imagekit.build.engine_choice import default_engine
from imagekit.build.pin import PinLine, pin
from imagekit.build.records import BuildRecord

__all__ = ["BuildFailed", "BuildRecord", "PinLine", "build_image", "build_key", "ensure_build",
           "default_engine", "latest_build",
           "pin"]
