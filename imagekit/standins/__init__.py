"""Local stand-in bases reproducing the field record's broken SGLang and vLLM images."""

from imagekit.standins.build import StandinRecord, build_standins, ca_bundle, torch_wheel
from imagekit.standins.rootfs import ensure_rootfs_image, rootfs_tag

__all__ = ["StandinRecord", "build_standins", "ca_bundle", "ensure_rootfs_image", "rootfs_tag",
           "torch_wheel"]
