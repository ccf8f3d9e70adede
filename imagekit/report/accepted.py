"""Statuses the images spec accepts for one image's check in one profile (`[profiles.X.accept]`
`"<image>.<probe>" = {status, reason}`), applied to the report and the gate.

An accepted line keeps its real status everywhere (FAIL stays FAIL in every format); only the
verdict takes the acceptance: it becomes a warning, with the reason shown. The status must match
exactly (an accepted FAIL does not accept an ERROR) and it applies only to the probe checks it
names. Acceptances apply only when the profile is known — given by the caller, or named as
`profile` in the image's own evidence — never by guessing the spec's default profile.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from imagekit.evidence import EvidenceResult
from imagekit.evidence.kinds import BuildResult, ImagesVerifyResult, ProbeResult
from imagekit.results import Status

#: Evidence kinds whose checks are the spec's probes (same names as the spec's probe list).
PROBE_KINDS = frozenset({"probe", "images-verify", "cluster-probe"})


class Accepted(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    check: str
    status: Status
    reason: str
    source: str
    profile: str | None = None
    spec_digest: str | None = None


def _spec_name(value: object) -> str | None:
    """A spec image name (`sglang`), not a reference (`127.0.0.1:5001/imagekit/sglang@…`)."""
    if isinstance(value, str) and value and not any(ch in value for ch in "/:@"):
        return value
    return None


def image_and_profile(results: list[EvidenceResult | None]) -> tuple[str | None, str | None]:
    """The spec image name and profile the latest results name: a build's `name`/`profile`,
    an images-verify result's `image`/`profile`, a probe run by spec name."""
    image = profile = None
    for result in reversed(results):
        if isinstance(result, BuildResult):
            found, found_profile = _spec_name(result.name), result.profile
        elif isinstance(result, ImagesVerifyResult):
            found, found_profile = _spec_name(result.image), result.profile
        elif isinstance(result, ProbeResult):
            found, found_profile = _spec_name(result.image), None
        else:
            continue
        image = image or found
        profile = profile or found_profile
        if image and profile:
            break
    return image, profile


def from_spec(image: str | None, profile: str | None,
              spec_path: Path | None = None) -> list[Accepted]:
    """The profile's acceptances for `image`; [] when either is unknown or no spec is here.
    A spec that exists but cannot be read is an error (SpecError), not silence. `spec_path`:
    the spec the CLI names (`--spec`, else $IMAGEKIT_IMAGES_SPEC), else the default one
    (imagekit.spec.default_spec_path)."""
    if not image or not profile:
        return []
    try:
        from imagekit.spec import default_spec_path, load_spec
        from imagekit.spec.models import CLUSTER_ACCEPT_PREFIX
    except ImportError:
        return []
    path = default_spec_path(spec_path)
    if not path.is_file():
        return []
    spec = load_spec(path)
    if profile not in spec.profiles:
        return []
    import hashlib
    spec_digest = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    found = []
    for key, acceptance in spec.profiles[profile].accept.items():
        name, _, check = key.partition(".")
        # `<image>.cluster-accept:<check>` is the rehearsal's judge's (a DEFERRED of
        # `cluster accept` it lets stand), not a probe acceptance of the image phase
        if name == image and not check.startswith(CLUSTER_ACCEPT_PREFIX):
            found.append(Accepted(check=check, status=Status(acceptance.status),
                                  reason=acceptance.reason,
                                  source=f"profile {profile} of {path}", profile=profile,
                                  spec_digest=spec_digest))
    return found


def match(kind: str, name: str, status: Status, accepted: list[Accepted]) -> Accepted | None:
    if kind not in PROBE_KINDS:
        return None
    # the cluster probe names its in-Pod probes `probe:<name>` beside its own checks (image_id…)
    probe = name.removeprefix("probe:") if kind == "cluster-probe" else name
    for entry in accepted:
        if entry.check == probe and entry.status is status:
            return entry
    return None
