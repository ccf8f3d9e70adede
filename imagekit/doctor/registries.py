"""Which registries a role uses (from the images spec's profile), and one bounded question to
each, through imagekit's own registry client and its credentials.

Pull: a HEAD of a manifest in a repository the role reads. 200 and 404 both mean the
credentials (or anonymous access) were let in — distribution answers 401 before it looks for
the manifest. Push: an upload session is opened and cancelled at once, what
go-containerregistry's `remote.CheckPushPermission` does: the only question a registry answers
about push rights without a write that stays (an abandoned session is purged by the registry
even when the cancel is lost).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from imagekit.doctor.models import Access, Part, RegistryNeed, Role
from imagekit.errors import ImagekitError, TransportError
from imagekit.oci import ImageReference
from imagekit.results import CheckResult, Status

if TYPE_CHECKING:
    from imagekit.registry import RegistryClient, RegistryOptions
    from imagekit.spec.models import ImagesSpec

#: The tag asked for in a repository the role writes to or reads by digest: it need not exist
#: (a 404 is an answer past authentication).
ANY_TAG = "latest"

#: what each role does at each place of the profile: base and mirror are the build's inputs,
#: staging/production/target the promotion's hops (None: no use)
USES: dict[Role | None, dict[str, Access]] = {
    Role.CI: {"base": Access.PULL, "mirror": Access.PULL, "staging": Access.PUSH},
    Role.RELEASE: {"staging": Access.PULL, "production": Access.PUSH, "target": Access.PUSH},
    Role.OPERATOR: {"staging": Access.PULL, "production": Access.PULL, "target": Access.PULL},
    Role.AUDITOR: {"staging": Access.PULL, "production": Access.PULL, "target": Access.PULL},
    None: {"base": Access.PULL, "mirror": Access.PULL, "staging": Access.PUSH,
           "production": Access.PUSH, "target": Access.PUSH},
}


def registry_needs(spec: ImagesSpec, profile: str, role: Role | None) -> list[RegistryNeed]:
    """One need per registry host the role uses in `profile`: the strongest access there
    (push wins over pull), asked about one repository of the spec, in the spec's order."""
    uses = USES[role]
    chosen = spec.profiles[profile]
    found: dict[str, RegistryNeed] = {}

    def add(place: str, ref: ImageReference, tag: str | None) -> None:
        access = uses.get(place)
        if access is None:
            return
        known = found.get(ref.registry)
        if known is None:
            found[ref.registry] = RegistryNeed(registry=ref.registry, repository=ref.repository,
                                               tag=tag, access=access, places=(place,))
            return
        places = known.places + ((place,) if place not in known.places else ())
        if access is Access.PUSH and known.access is Access.PULL:
            known = known.model_copy(update={"repository": ref.repository, "tag": tag,
                                             "access": access})
        found[ref.registry] = known.model_copy(update={"places": places})

    for image in spec.images.values():
        base = image.base[profile]
        add("base", base, base.tag)
        if profile in image.mirror:
            mirror = image.mirror[profile]
            add("mirror", mirror, mirror.tag)
        for place in image.promotion:   # the role writes there, or reads by digest: no tag
            add(place, ImageReference.parse(f"{chosen.registry_for(place)}/{image.repository}"),
                None)
    return list(found.values())


def check_name(registry: str) -> str:
    return f"{Part.REGISTRIES.value} {registry}"


def _who(client: RegistryClient) -> str:
    credential = client.transport.auth.credential()
    return f"as {credential}" if credential is not None else "anonymously"


def _push(client: RegistryClient, repository: str) -> None:
    """Open an upload session and cancel it (best effort: the registry expires it anyway)."""
    scopes = client.push_scope(repository)
    response = client.request("POST", f"/v2/{repository}/blobs/uploads/", scopes=scopes,
                              headers={"Content-Length": "0"})
    response.close()
    location = response.headers.get("location")
    if response.status_code != 202 or not location:
        raise TransportError(f"opening an upload session answered HTTP "
                             f"{response.status_code}", where=f"{client.registry}/{repository}")
    with contextlib.suppress(ImagekitError):
        client.request("DELETE", location, scopes=scopes).close()


def check_registry(need: RegistryNeed, options: RegistryOptions, seconds: float) -> CheckResult:
    """PASS when the role's access works at `need.registry`; FAIL with the client's own
    words (refused credentials and the sources tried, a closed port, an untrusted
    certificate) when it does not. Every call of it ends within `seconds`, retries included."""
    from imagekit.registry import RegistryClient
    from imagekit.registry.retry import wall_clock

    name = check_name(need.registry)
    places = ", ".join(need.places)
    data = need.model_dump(mode="json")
    try:
        with wall_clock(seconds), RegistryClient(need.registry, options) as client:
            note = ""
            if need.access is Access.PUSH:
                _push(client, need.repository)
                said = f"may push to {need.repository}"
            elif need.tag is None:
                client.head_manifest(need.repository, ANY_TAG)
                said = f"may pull from {need.repository}"
            else:
                exists = client.head_manifest(need.repository, need.tag)[1]
                said = f"may pull {need.repository}:{need.tag}"
                note = "" if exists else "; that tag is not there"
            who = _who(client)
    except ImagekitError as exc:
        # the client's messages name the registry first; the line already does
        said = exc.message.removeprefix(f"registry {need.registry} ")
        return CheckResult(name=name, status=Status.FAIL, data=data,
                           detail=f"{said} ({places})")
    return CheckResult(name=name, status=Status.PASS, data=data,
                       detail=f"{said} {who} ({places}{note})")
