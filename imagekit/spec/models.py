"""Pydantic models of `dockerfiles/images.toml`: images, their bases per profile, probes, the
promotion chain, and which non-PASS statuses a profile accepts (with the reason, always shown).

Validation happens here so that every bad spec fails before any engine call, with one line.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from imagekit.oci import Digest, ImageReference
from imagekit.registry.shape import UploadShape
from imagekit.results import Status

KNOWN_ENGINES = ("sglang", "vllm")
KNOWN_PROBES = ("pip_check", "find_spec", "av_roundtrip", "cli_help", "torch_arch", "serve_args")
REGISTRY_ROLES = ("staging", "production", "target")
#: the folder beside the spec holding the stand-in Dockerfiles of a `standins = true` profile
STANDINS_FOLDER = "standins"
#: An acceptance key's check part for a check of `cluster accept` (`"vllm.cluster-accept:
#: tool-calling"`): named apart from the image's probes so a mistyped probe is still refused.
CLUSTER_ACCEPT_PREFIX = "cluster-accept:"
_CHECK_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")


class Acceptance(BaseModel):
    """A non-PASS status the image phase accepts for one check, and why. Accepted checks keep
    their real status in every manifest; only the verdict and exit code take the acceptance."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: Literal[Status.FAIL, Status.DEFERRED]
    reason: str = Field(min_length=8)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    lock: str
    standins: bool = False
    #: None: pip's own default index (nothing is passed to the build)
    pip_index_url: str | None = None
    staging: str
    production: str
    target: str
    accept: dict[str, Acceptance] = {}
    #: Checks required (gate requirements, e.g. "cluster-accept") before a promotion whose
    #: destination is this profile's last registry: acceptance on the cluster before the final
    #: hop. Added to the gate's usual requirements; empty by default.
    final_hop_requires: list[str] = []
    #: `images verify` also rebuilds each image on a second, fresh build engine and checks
    #: that it gives the digest verified (the `reproducible` check; `--rebuild` asks for it
    #: on any profile)
    reproducible: bool = False
    #: the semantic cases `cluster accept` judges answers by: a shipped set (`record`,
    #: `stand-in`) or a cases file relative to the spec (docs/reference/cases.md)
    cases: str = Field("record", min_length=1)

    @field_validator("cases")
    @classmethod
    def _cases(cls, value: str) -> str:
        from imagekit import packaged

        shipped = packaged.path("manifests", "acceptance", "cases")
        if not value.endswith(".toml") and not (shipped / f"{value}.toml").is_file():
            names = ", ".join(sorted(p.stem for p in shipped.glob("*.toml")))
            raise ValueError(f"cases {value!r} is neither a shipped set ({names}) nor a .toml "
                             "file")
        return value

    def registry_for(self, role: str) -> str:
        return getattr(self, role)

    def cluster_accept_allowances(self, image: str) -> dict[str, Acceptance]:
        """The checks of `cluster accept` this profile lets stay DEFERRED for `image`, by check
        name (`"vllm.cluster-accept:tool-calling"` gives `tool-calling`), each with its reason."""
        found = {}
        for key, acceptance in self.accept.items():
            name, _, check = key.partition(".")
            if name == image and check.startswith(CLUSTER_ACCEPT_PREFIX):
                found[check.removeprefix(CLUSTER_ACCEPT_PREFIX)] = acceptance
        return found


class ServeSetting(BaseModel):
    """One serve command the image will be launched with: launch.sh's variables (ENGINE is the
    image's) and the extra engine arguments, for the profiles named (none: every profile). The
    `serve_args` probe parses each with the engine's own parser."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env: dict[str, str] = {}
    args: list[str] = []
    profiles: list[str] = []

    @field_validator("env")
    @classmethod
    def _launch_variables(cls, value: dict[str, str]) -> dict[str, str]:
        from imagekit.launch.command import LAUNCH_VARIABLES

        unknown = sorted(k for k in value if k not in LAUNCH_VARIABLES or k == "ENGINE")
        if unknown:
            raise ValueError(f"serve env: not launch.sh variable(s) {', '.join(unknown)} "
                             f"(known: {', '.join(v for v in LAUNCH_VARIABLES if v != 'ENGINE')};"
                             " ENGINE is the image's)")
        return value

    def config(self, engine: str):  # noqa: ANN201 - a launch ServeConfig
        from imagekit.launch.command import ServeConfig

        return ServeConfig.from_env({**self.env, "ENGINE": engine}, extra_args=tuple(self.args))


class ImageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: str
    dockerfile: str
    repository: str
    probes: list[str]
    find_spec: list[str] = []
    promotion: list[str] = list(REGISTRY_ROLES)
    base: dict[str, ImageReference]
    mirror: dict[str, ImageReference] = {}
    build_args: dict[str, dict[str, str]] = {}
    #: label -> a serve command the serve_args probe parses (none: launch.sh's defaults)
    serve: dict[str, ServeSetting] = {}

    @model_validator(mode="after")
    def _serve_settings_build(self) -> ImageSpec:
        from imagekit.errors import InvalidInput

        for label, setting in self.serve.items():
            try:
                setting.config(self.engine)
            except InvalidInput as exc:
                raise ValueError(f"serve {label!r}: {exc.message}") from None
        return self

    def serve_for(self, profile: str | None) -> dict[str, ServeSetting]:
        return {label: s for label, s in self.serve.items()
                if not s.profiles or profile is None or profile in s.profiles}

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in KNOWN_ENGINES:
            raise ValueError(f"unknown engine {value!r} (known: {', '.join(KNOWN_ENGINES)})")
        return value

    @field_validator("repository")
    @classmethod
    def _oci_repository(cls, value: str) -> str:
        from imagekit.errors import InvalidInput
        from imagekit.inputs import oci_repository

        try:  # `UPPER/Case::x` would build, tag nothing pushable, and record a PASS
            return oci_repository(value, "repository")
        except InvalidInput as exc:
            raise ValueError(exc.message) from None

    @field_validator("dockerfile")
    @classmethod
    def _relative_dockerfile(cls, value: str) -> str:
        if not value or value.startswith("/") or "\x00" in value:
            raise ValueError(f"dockerfile {value!r} must be a path relative to the spec")
        return value

    @field_validator("probes")
    @classmethod
    def _known_probes(cls, value: list[str]) -> list[str]:
        unknown = [p for p in value if p not in KNOWN_PROBES]
        if unknown:
            raise ValueError(f"unknown probe(s) {', '.join(unknown)} "
                             f"(known: {', '.join(KNOWN_PROBES)})")
        if not value:
            raise ValueError("an image needs at least one probe")
        return value

    @field_validator("promotion")
    @classmethod
    def _known_roles(cls, value: list[str]) -> list[str]:
        unknown = [r for r in value if r not in REGISTRY_ROLES]
        if unknown:
            raise ValueError(f"unknown registry role(s) {', '.join(unknown)} in promotion")
        return value

    @field_validator("base", "mirror")
    @classmethod
    def _tags_not_digests(cls, value: dict[str, ImageReference]) -> dict[str, ImageReference]:
        for profile, ref in value.items():
            if ref.digest is not None:
                raise ValueError(f"base for profile {profile!r} must be a tag; digests belong "
                                 "in the lock (imagekit pin)")
            if ref.tag is None:
                raise ValueError(f"base for profile {profile!r} names no tag")
        return value


class ImagesSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal[1]
    default_profile: str
    images: dict[str, ImageSpec]
    profiles: dict[str, Profile]
    #: Each registry's upload shape, `[registries."HOST[:PORT]"]` (imagekit/registry/shape.py);
    #: a registries file (IMAGEKIT_REGISTRIES) wins for the hosts it names.
    registries: dict[str, UploadShape] = {}
    #: Where the spec was read from; Dockerfiles and locks are relative to it.
    root: Path = Path(".")

    @model_validator(mode="after")
    def _consistent(self) -> ImagesSpec:
        if self.default_profile not in self.profiles:
            raise ValueError(f"default_profile {self.default_profile!r} is not a profile")
        if not self.images:
            raise ValueError("the spec names no images")
        for name, image in self.images.items():
            for profile in image.base:
                if profile not in self.profiles:
                    raise ValueError(f"image {name!r}: base names unknown profile {profile!r}")
            for profile in self.profiles:
                if profile not in image.base:
                    raise ValueError(f"image {name!r} has no base for profile {profile!r}")
        for pname, prof in self.profiles.items():
            for key, acceptance in prof.accept.items():
                image_name, _, check = key.partition(".")
                accept_check = check.removeprefix(CLUSTER_ACCEPT_PREFIX)
                if check != accept_check and image_name in self.images and \
                        _CHECK_NAME.fullmatch(accept_check):
                    if acceptance.status != Status.DEFERRED:  # a wrong answer never is
                        raise ValueError(f"profile {pname!r}: accept key {key!r}: a check of "
                                         "cluster accept may be accepted DEFERRED only")
                elif image_name not in self.images or check not in KNOWN_PROBES:
                    raise ValueError(f"profile {pname!r}: accept key {key!r} is not "
                                     "'<image>.<probe>' or '<image>.cluster-accept:<check>' "
                                     "of this spec")
        return self

    def final_hop_requirements(self, registry: str) -> list[str]:
        """What the profiles whose target registry is `registry` require before a promotion
        lands there (their `final_hop_requires`, deduplicated)."""
        found: list[str] = []
        for prof in self.profiles.values():
            if prof.target == registry:
                found += [r for r in prof.final_hop_requires if r not in found]
        return found

    def profile(self, name: str | None) -> tuple[str, Profile]:
        from imagekit.errors import SpecError

        if name is not None and not (isinstance(name, str) and name.strip()):
            raise SpecError(f"--profile {name!r} is empty: name a profile (known: "
                            f"{', '.join(self.profiles)}) or leave the option out",
                            where="--profile")
        chosen = self.default_profile if name is None else name
        if chosen not in self.profiles:
            raise SpecError(f"unknown profile {chosen!r} (known: {', '.join(self.profiles)})",
                            where=str(self.root / "images.toml"))
        return chosen, self.profiles[chosen]

    def image(self, name: str) -> ImageSpec:
        from imagekit.errors import SpecError

        if name not in self.images:
            raise SpecError(f"no image {name!r} in the spec (known: {', '.join(self.images)})",
                            where=str(self.root / "images.toml"))
        return self.images[name]

    def dockerfile_path(self, name: str) -> Path:
        return (self.root / self.images[name].dockerfile).resolve()

    def lock_path(self, profile: str) -> Path:
        """The profile's lock: beside the spec, always (every reader and writer asks here)."""
        return (self.root / self.profiles[profile].lock).resolve()

    def writable_lock_path(self, profile: str) -> Path:
        """`lock_path`, for a writer (`pin`, `standins build`). The spec shipped in the
        installed wheel is refused: its lock would land in site-packages, where an upgrade
        replaces the spec it pins (a lock in the working folder instead would pin a spec
        that is not beside it). `imagekit init` copies the spec into a folder of one's own."""
        from imagekit import packaged
        from imagekit.errors import SpecError

        path = self.lock_path(profile)
        if packaged.in_installed_package(self.root):
            raise SpecError("the packaged spec is read-only (a lock beside it would be "
                            "written into the installed package): run `imagekit init` to copy "
                            "it into this folder, then pass --spec images.toml",
                            where=str(self.root / "images.toml"))
        return path


class ResolvedImage(BaseModel):
    """One image of one profile with its base pinned by the lock: what a build consumes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    profile: str
    engine: str
    dockerfile: Path
    context: Path
    repository: str
    base_tag: ImageReference
    base_digest: Digest
    #: when `imagekit pin` resolved the base (the build's time when the spec is not in git)
    base_resolved: dt.datetime | None = None
    mirror: ImageReference | None = None
    mirror_digest: Digest | None = None
    build_args: dict[str, str] = {}
    pip_index_url: str | None
    staging: str
    probes: list[str]
    find_spec: list[str]
    serve: dict[str, ServeSetting] = {}

    @property
    def base_pinned(self) -> ImageReference:
        return self.base_tag.with_digest(self.base_digest)

    @property
    def staging_repository(self) -> str:
        return f"{self.staging}/{self.repository}"
