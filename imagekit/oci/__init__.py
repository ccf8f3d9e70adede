"""Pure OCI types: no I/O. Everything above speaks these nouns."""

from imagekit.oci import mediatypes
from imagekit.oci.descriptor import Descriptor
from imagekit.oci.digest import Digest
from imagekit.oci.manifest import (
    ImageConfig,
    ImageIndex,
    ImageManifest,
    Manifest,
    RootFS,
    parse_config,
    parse_manifest,
)
from imagekit.oci.platform import LINUX_AMD64, Platform
from imagekit.oci.reference import DOCKER_HUB, ImageReference

__all__ = [
    "DOCKER_HUB", "LINUX_AMD64", "Descriptor", "Digest", "ImageConfig", "ImageIndex",
    "ImageManifest", "ImageReference", "Manifest", "Platform", "RootFS", "mediatypes",
    "parse_config", "parse_manifest",
]
