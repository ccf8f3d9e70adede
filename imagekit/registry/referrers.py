"""OCI referrers of a digest: list, attach, detach — the API where the registry has it, the
referrers tag schema where it does not (distribution 2.8, `crane registry serve`).

Distribution spec 1.1 rules followed here:
- listing: `GET /v2/<repo>/referrers/<digest>`; 200 is the answer (every `Link: rel="next"`
  page followed); 404 means "no API here", so the tag `<alg>-<hex>` (an image index of
  descriptors) is read instead; any other answer is an error — never "no referrers".
- attaching: the manifest with `subject` is PUT by digest; a registry with the API answers an
  `OCI-Subject` header and maintains the list itself; without that header the client adds the
  descriptor to the tag-schema index and pushes it again (read-modify-write: two writers at the
  same instant can lose an entry — the spec accepts that race, re-attaching repairs it).

Built only on `RegistryClient`'s public methods (`request`, `get_manifest`, `put_manifest`);
one primitive of its own: `push_small_blob`, a monolithic upload (POST, then PUT `?digest=`
with the whole body) for the few-KiB blobs of attestations — one exchange, and it works on
registries whose chunked-upload answers differ (crane's registry answers PATCH with 204).
"""

from __future__ import annotations

import json

from imagekit.errors import InvalidInput, NotFound, TransportError
from imagekit.oci import mediatypes as mt
from imagekit.oci.digest import Digest
from imagekit.oci.referrers import (
    MAX_LISTED,
    ReferrerDescriptor,
    RegistryDocumentError,
    dedupe,
    parse_index,
)
from imagekit.registry.client import ManifestBlob, RegistryClient
from imagekit.registry.retry import wall_clock

#: Pages followed at most (a registry looping its Link header is an error, not a hang).
MAX_PAGES = 100


def tag_schema_tag(digest: Digest) -> str:
    return f"{digest.algorithm}-{digest.hex}"


def descriptor_of(blob: ManifestBlob) -> dict:
    """The index entry for a referrer manifest: artifactType = the manifest's artifactType,
    else its config media type (the spec's rule); its annotations copied."""
    body = json.loads(blob.data)
    entry: dict = {"mediaType": blob.media_type, "digest": str(blob.digest),
                   "size": len(blob.data)}
    artifact_type = body.get("artifactType") or (body.get("config") or {}).get("mediaType")
    if artifact_type:
        entry["artifactType"] = artifact_type
    if body.get("annotations"):
        entry["annotations"] = body["annotations"]
    return entry


def subject_of(blob: ManifestBlob) -> Digest | None:
    try:
        subject = (json.loads(blob.data).get("subject") or {}).get("digest")
        return Digest.parse(subject) if subject else None
    except (ValueError, AttributeError, InvalidInput):
        return None


def _filter(entries: list[dict], artifact_type: str | None) -> list[dict]:
    if artifact_type is None:
        return entries
    return [e for e in entries if e.get("artifactType") == artifact_type]


def _api(client: RegistryClient, repository: str, digest: Digest
         ) -> list[ReferrerDescriptor] | None:
    """The API's list (all pages), or None when the registry answers 404 (no API)."""
    where = f"{client.registry}/{repository} referrers of {digest}"
    url: str | None = f"/v2/{repository}/referrers/{digest}"
    entries: list[ReferrerDescriptor] = []
    pages = 0
    while url:
        pages += 1
        if pages > MAX_PAGES:
            raise TransportError(f"referrers list exceeds {MAX_PAGES} pages", where=where)
        response = client.request("GET", url, scopes=client.pull_scope(repository),
                                  headers={"Accept": mt.OCI_INDEX})
        if response.status_code == 404 and pages == 1:
            return None
        if response.status_code != 200:
            raise TransportError(f"referrers API answered HTTP {response.status_code}",
                                 where=where)
        entries += parse_index(response.content, where, what="referrers API index").manifests
        if len(entries) > MAX_LISTED:
            raise RegistryDocumentError(f"referrers API lists more than {MAX_LISTED} entries",
                                        where=where)
        url = response.links.get("next", {}).get("url")
    return entries


def _tag_index(client: RegistryClient, repository: str, digest: Digest) -> list[dict] | None:
    try:
        blob = client.get_manifest(repository, tag_schema_tag(digest))
    except NotFound:
        return None
    where = f"{client.registry}/{repository}:{tag_schema_tag(digest)}"
    return [e.dump() for e in parse_index(blob.data, where,
                                          what="referrers tag schema index").manifests]


#: Seconds one whole listing (every page, tag-schema fallback included) may take, however the
#: registry answers: a referrers API answering 500 is not waited on for the 30 s deadline.
LISTING_DEADLINE_S = 3.0


def list_referrers(client: RegistryClient, repository: str, digest: Digest,
                   artifact_type: str | None = None) -> list[dict]:
    """Descriptors of the manifests whose `subject` is `digest` (optionally of one type),
    each digest once, every document parsed by `imagekit.oci.referrers` (bounded, strict)."""
    where = f"{client.registry}/{repository} referrers of {digest}"
    seconds = client.options.referrers_deadline_s  # IMAGEKIT_REFERRERS_DEADLINE, default 3
    with wall_clock(seconds):
        try:
            entries = _api(client, repository, digest)
            if entries is None:
                entries = [ReferrerDescriptor.model_validate(e)
                           for e in _tag_index(client, repository, digest) or []]
        except RegistryDocumentError:
            raise
        except TransportError as exc:  # named: the registry and the document it failed on
            raise TransportError(f"referrers listing failed within its {seconds:g} s: "
                                 f"{exc.message}", where=where) from None
    unique = [e.dump() for e in dedupe(entries, where)]
    return _filter(unique, artifact_type)


def _put_index(client: RegistryClient, repository: str, digest: Digest,
               entries: list[dict]) -> None:
    index = {"schemaVersion": 2, "mediaType": mt.OCI_INDEX, "manifests": entries}
    data = json.dumps(index, separators=(",", ":")).encode()
    client.put_manifest(repository, tag_schema_tag(digest),
                        ManifestBlob(data, mt.OCI_INDEX, Digest.of_bytes(data)))


#: Blobs up to this size go monolithic (attestation bundles, SBOMs, empty configs).
SMALL_BLOB = 16 << 20


def push_small_blob(client: RegistryClient, repository: str, data: bytes) -> Digest:
    """Upload `data` in one PUT unless the registry has it already; returns its digest."""
    digest = Digest.of_bytes(data)
    where = f"{client.registry}/{repository}@{digest}"
    if client.blob_exists(repository, digest):
        return digest
    scopes = client.push_scope(repository)
    started = client.request("POST", f"/v2/{repository}/blobs/uploads/", scopes=scopes)
    location = started.headers.get("location")
    if started.status_code != 202 or not location:
        raise TransportError(f"blob upload POST answered HTTP {started.status_code}",
                             where=where)
    if not location.startswith(("http://", "https://", "/")):
        location = "/" + location
    done = client.request("PUT", location, scopes=scopes, params={"digest": str(digest)},
                          content=data, headers={"Content-Type": "application/octet-stream",
                                                 "Content-Length": str(len(data))})
    if done.status_code not in (201, 204):
        raise TransportError(f"blob upload PUT answered HTTP {done.status_code}: "
                             f"{done.text[:200]}", where=where)
    return digest


def attach(client: RegistryClient, repository: str, blob: ManifestBlob) -> str:
    """Push a referrer manifest (it must name a `subject`) and make it listable. Returns
    "api" when the registry maintains the list (OCI-Subject), else "tag-schema"."""
    subject = subject_of(blob)
    if subject is None:
        raise InvalidInput("a referrer manifest needs a subject", where=str(blob.digest))
    where = f"{client.registry}/{repository}@{blob.digest}"
    response = client.request("PUT", f"/v2/{repository}/manifests/{blob.digest}",
                              scopes=client.push_scope(repository), content=blob.data,
                              headers={"Content-Type": blob.media_type})
    if response.status_code not in (200, 201, 202):
        raise TransportError(f"referrer manifest PUT answered HTTP {response.status_code}: "
                             f"{response.text[:200]}", where=where)
    if response.headers.get("oci-subject") == str(subject):
        return "api"
    entries = _tag_index(client, repository, subject) or []
    if not any(e.get("digest") == str(blob.digest) for e in entries):
        _put_index(client, repository, subject, [*entries, descriptor_of(blob)])
    return "tag-schema"


def detach(client: RegistryClient, repository: str, subject: Digest, referrer: Digest) -> None:
    """Remove a referrer: out of the tag-schema index (when there is one), then the manifest
    itself deleted (where the registry allows deletes; a 405 leaves it unreferenced)."""
    entries = _tag_index(client, repository, subject)
    if entries is not None:
        _put_index(client, repository, subject,
                   [e for e in entries if e.get("digest") != str(referrer)])
    response = client.request("DELETE", f"/v2/{repository}/manifests/{referrer}",
                              scopes=client.push_scope(repository))
    if response.status_code not in (200, 202, 404, 405):
        raise TransportError(f"referrer DELETE answered HTTP {response.status_code}",
                             where=f"{client.registry}/{repository}@{referrer}")
