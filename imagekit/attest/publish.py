"""Sign a statement and attach it to a digest as an OCI referrer, in the layout cosign 3
writes for `cosign attest` (and reads with `cosign verify-attestation --key`):

- an OCI image manifest, `artifactType: application/vnd.dev.sigstore.bundle.v0.3+json`,
  the empty config (`application/vnd.oci.empty.v1+json`, `{}`), one layer = the Sigstore
  bundle holding the DSSE envelope, annotations `dev.sigstore.bundle.content: dsse-envelope`
  and `dev.sigstore.bundle.predicateType: <type>`, `subject` = the image descriptor;
- listed through the referrers API or, without it, the `sha256-<hex>` tag-schema index.
"""

from __future__ import annotations

import datetime as dt
import json

from cryptography.hazmat.primitives.asymmetric import ec

from imagekit.attest.dsse import BUNDLE_MEDIA_TYPE, bundle_of, sign_envelope
from imagekit.attest.models import Attached
from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.registry import ManifestBlob, RegistryClient
from imagekit.registry.referrers import attach, push_small_blob

EMPTY_CONFIG = b"{}"
CONTENT_ANNOTATION = "dev.sigstore.bundle.content"
PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"


def referrer_manifest(subject: ManifestBlob, bundle: Digest, bundle_size: int,
                      predicate_type: str) -> ManifestBlob:
    manifest = {
        "schemaVersion": 2, "mediaType": mt.OCI_MANIFEST, "artifactType": BUNDLE_MEDIA_TYPE,
        "config": {"mediaType": mt.OCI_EMPTY, "size": len(EMPTY_CONFIG),
                   "digest": str(Digest.of_bytes(EMPTY_CONFIG))},
        "layers": [{"mediaType": BUNDLE_MEDIA_TYPE, "size": bundle_size,
                    "digest": str(bundle)}],
        "annotations": {
            CONTENT_ANNOTATION: "dsse-envelope", PREDICATE_ANNOTATION: predicate_type,
            "org.opencontainers.image.created":
                dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")},
        "subject": {"mediaType": subject.media_type, "size": len(subject.data),
                    "digest": str(subject.digest)},
    }
    data = json.dumps(manifest, separators=(",", ":")).encode()
    return ManifestBlob(data, mt.OCI_MANIFEST, Digest.of_bytes(data))


def sign_and_attach(client: RegistryClient, repository: str, subject: ManifestBlob,
                    statement: dict, key: ec.EllipticCurvePrivateKey) -> Attached:
    """DSSE-sign `statement`, wrap it in a bundle, push bundle + empty config + manifest."""
    bundle = bundle_of(sign_envelope(statement, key), key)
    bundle_digest = push_small_blob(client, repository, bundle)
    push_small_blob(client, repository, EMPTY_CONFIG)
    manifest = referrer_manifest(subject, bundle_digest, len(bundle), statement["predicateType"])
    listing = attach(client, repository, manifest)
    return Attached(repository=repository, subject=str(subject.digest),
                    predicate_type=statement["predicateType"], manifest=str(manifest.digest),
                    bundle=str(bundle_digest), listing=listing)  # type: ignore[arg-type]
