"""Media types of OCI and Docker v2 manifests, indexes, configs and layers."""

from __future__ import annotations

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER_ZSTD = "application/vnd.oci.image.layer.v1.tar+zstd"
OCI_EMPTY = "application/vnd.oci.empty.v1+json"

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
DOCKER_LAYER_FOREIGN_GZIP = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"

INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
IMAGE_MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
MANIFEST_TYPES = INDEX_TYPES | IMAGE_MANIFEST_TYPES

#: What a client sends as Accept so that any of the four manifest kinds comes back unchanged.
MANIFEST_ACCEPT = ", ".join([OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST])

GZIP_LAYERS = frozenset({OCI_LAYER_GZIP, DOCKER_LAYER_GZIP, DOCKER_LAYER_FOREIGN_GZIP,
                         "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip"})
ZSTD_LAYERS = frozenset({OCI_LAYER_ZSTD,
                         "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd"})
PLAIN_LAYERS = frozenset({OCI_LAYER, "application/vnd.oci.image.layer.nondistributable.v1.tar"})

#: Annotation buildx puts on attestation entries of an index.
REFERENCE_TYPE_ANNOTATION = "vnd.docker.reference.type"
ATTESTATION_MANIFEST = "attestation-manifest"


def layer_compression(media_type: str) -> str:
    """'gzip', 'zstd' or 'none' for a layer media type; ValueError for anything else."""
    if media_type in GZIP_LAYERS:
        return "gzip"
    if media_type in ZSTD_LAYERS:
        return "zstd"
    if media_type in PLAIN_LAYERS:
        return "none"
    raise ValueError(f"not a known layer media type: {media_type}")
