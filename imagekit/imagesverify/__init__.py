"""`images verify`: build, push, probe, verify-copy and the image manifest, with a cache."""

from imagekit.imagesverify.models import AcceptedCheck, ImageEntry, ImagesVerifyReport
from imagekit.imagesverify.run import fix_layers, judge, verify_images, verify_key

__all__ = ["AcceptedCheck", "ImageEntry", "ImagesVerifyReport", "fix_layers", "judge",
           "verify_images", "verify_key"]
