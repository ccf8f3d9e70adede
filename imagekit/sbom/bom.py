"""CycloneDX SBOM of an image: Python distributions from `pip inspect` run inside the image,
Debian packages from its dpkg status file — what is really installed, not what was asked for.

Building and diffing are pure functions of those two texts (`bom_from`, `diff_boms`), so the
diff against the previous build needs no docker; `collect` runs the image to get them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from cyclonedx.model import Property
from cyclonedx.model.bom import Bom
from cyclonedx.model.component import Component, ComponentType
from cyclonedx.output.json import JsonV1Dot6
from packageurl import PackageURL
from pydantic import BaseModel, ConfigDict

from imagekit.errors import InvalidInput
from imagekit.oci.digest import Digest

PIP_INSPECT = ["-m", "pip", "inspect", "--local"]
DPKG_STATUS = "/var/lib/dpkg/status"


def canonical(name: str) -> str:
    """PEP 503 name: what makes `Pillow` and `pillow` one package in a diff."""
    return re.sub(r"[-_.]+", "-", name).lower()


def python_packages(pip_inspect: str | None) -> list[tuple[str, str]]:
    if not pip_inspect:
        return []
    try:
        installed = json.loads(pip_inspect)["installed"]
        return sorted({(item["metadata"]["name"], item["metadata"]["version"])
                       for item in installed})
    except (ValueError, KeyError, TypeError):
        raise InvalidInput("pip inspect output is not pip's inspect report",
                           where="pip inspect") from None


def debian_packages(status: str | None) -> list[tuple[str, str, str]]:
    """(name, version, architecture) of every package dpkg calls installed."""
    found = []
    for paragraph in re.split(r"\n\s*\n", status or ""):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if fields.get("Package") and fields.get("Status", "").endswith(" installed"):
            found.append((fields["Package"], fields.get("Version", ""),
                          fields.get("Architecture", "")))
    return sorted(set(found))


def bom_from(digest: Digest, name: str, pip_inspect: str | None, dpkg_status: str | None
             ) -> dict:
    """CycloneDX 1.6 JSON (as a dict) with the image as the described component."""
    bom = Bom()
    bom.metadata.component = Component(
        name=name, version=str(digest), type=ComponentType.CONTAINER,
        bom_ref=f"image:{digest}")
    bom.metadata.properties.add(Property(name="imagekit:python",
                                         value="pip inspect" if pip_inspect else "absent"))
    bom.metadata.properties.add(Property(name="imagekit:dpkg",
                                         value=DPKG_STATUS if dpkg_status else "absent"))
    for pname, version in python_packages(pip_inspect):
        purl = PackageURL(type="pypi", name=canonical(pname), version=version)
        bom.components.add(Component(name=pname, version=version, purl=purl,
                                     type=ComponentType.LIBRARY, bom_ref=f"pypi:{purl}"))
    for dname, version, arch in debian_packages(dpkg_status):
        purl = PackageURL(type="deb", namespace="debian", name=dname, version=version,
                          qualifiers={"arch": arch} if arch else None)
        bom.components.add(Component(name=dname, version=version, purl=purl,
                                     type=ComponentType.LIBRARY, bom_ref=f"deb:{purl}"))
    bom.register_dependency(bom.metadata.component, list(bom.components))
    return json.loads(JsonV1Dot6(bom).output_as_string())


def packages_of(bom: dict) -> dict[str, str]:
    """`pypi/<name>` and `deb/<name>` -> version, from a CycloneDX document."""
    found: dict[str, str] = {}
    for component in bom.get("components") or []:
        purl = component.get("purl") or ""
        kind = purl[4:].split("/", 1)[0] if purl.startswith("pkg:") else "generic"
        name = canonical(component.get("name", "")) if kind == "pypi" else component.get("name")
        found[f"{kind}/{name}"] = component.get("version", "")
    return found


class PackageChange(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    package: str
    before: str | None
    after: str | None


class SbomDiff(BaseModel):
    """Packages added, removed and changed from one build of an image to the next."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    before: str
    after: str
    added: list[PackageChange] = []
    removed: list[PackageChange] = []
    changed: list[PackageChange] = []

    def lines(self) -> list[str]:
        return ([f"+ {c.package} {c.after}" for c in self.added]
                + [f"- {c.package} {c.before}" for c in self.removed]
                + [f"~ {c.package} {c.before} -> {c.after}" for c in self.changed])


def diff_boms(before: dict, after: dict, *, before_name: str = "before",
              after_name: str = "after") -> SbomDiff:
    old, new = packages_of(before), packages_of(after)
    return SbomDiff(
        before=before_name, after=after_name,
        added=[PackageChange(package=p, before=None, after=new[p]) for p in sorted(new)
               if p not in old],
        removed=[PackageChange(package=p, before=old[p], after=None) for p in sorted(old)
                 if p not in new],
        changed=[PackageChange(package=p, before=old[p], after=new[p]) for p in sorted(new)
                 if p in old and old[p] != new[p]])


def collect(engine, image: str, pythons: Iterable[str] = ("python3", "python")
            ) -> tuple[str | None, str | None]:
    """(pip inspect JSON, dpkg status) read by running `image` (no network). A missing
    interpreter or dpkg database gives None for that part — recorded in the SBOM as absent."""
    pip = None
    for python in pythons:
        outcome = engine.run(image, PIP_INSPECT, entrypoint=python, timeout=300)
        if outcome.returncode == 0 and outcome.stdout.strip().startswith("{"):
            pip = outcome.stdout
            break
    outcome = engine.run(image, [DPKG_STATUS], entrypoint="cat", timeout=120)
    dpkg = outcome.stdout if outcome.returncode == 0 else None
    return pip, dpkg
