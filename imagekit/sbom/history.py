"""SBOMs kept as evidence, per image name, so `imagekit report` can show what changed since the
previous build of the same image without running anything (packages added, removed, changed).

Key: `sbom-<name>` (the name made safe for a key), kind `sbom`; context `digest` (so the
report links the attempt to the image) and `image`; file `sbom.cdx.json`.
"""

from __future__ import annotations

import json
import re

from imagekit.errors import InvalidInput
from imagekit.evidence import EvidenceStore, Subject
from imagekit.evidence.kinds import SbomResult
from imagekit.oci import ImageReference
from imagekit.oci.digest import Digest
from imagekit.results import CheckResult, Status
from imagekit.sbom.bom import SbomDiff, diff_boms

KIND = "sbom"
FILE = "sbom.cdx.json"


def key_for(name: str) -> str:
    """`127.0.0.1:5001/imagekit-local/sglang:tag` -> `sbom-imagekit-local-sglang`: the
    registry and tag are not the image's identity (a promoted image keeps its history)."""
    try:
        repository = ImageReference.parse(name).repository
    except InvalidInput:
        repository = name
    return "sbom-" + re.sub(r"[^a-z0-9]+", "-", repository.lower()).strip("-")


def record_sbom(store: EvidenceStore, name: str, digest: Digest, bom: dict) -> str:
    components = len(bom.get("components") or [])
    with store.attempt(key_for(name), KIND, subjects=[Subject.of(digest, reference=name)],
                       digest=str(digest), image=name) as attempt:
        attempt.write_json(FILE, bom)
        attempt.write_result(SbomResult(image=name, digest=str(digest), components=components))
        if components:
            attempt.add_check(CheckResult(name="sbom", status=Status.PASS,
                                          detail=f"{components} components of {digest}"))
        else:  # nothing could be read from the image: an empty inventory is not a PASS
            attempt.add_check(CheckResult(name="sbom", status=Status.FAIL,
                                          detail=f"0 components of {digest}: no python and no "
                                                 "dpkg database could be read"))
        return str(attempt.path)


def sboms(store: EvidenceStore, name: str) -> list[tuple[Digest, dict]]:
    """(digest, SBOM) of every recorded build of `name`, oldest first, one per digest."""
    found: dict[str, dict] = {}
    for record in store.attempts(key_for(name), KIND):
        if record.status is not Status.PASS:
            continue
        path = store.path_of(record) / FILE
        result = store.result(record)
        digest = result.digest if isinstance(result, SbomResult) else ""
        if path.is_file() and digest:
            found.pop(digest, None)
            found[digest] = json.loads(path.read_text())
    return [(Digest.parse(d), bom) for d, bom in found.items()]


def sbom_diff(store: EvidenceStore, name: str, digest: Digest | None = None) -> SbomDiff | None:
    """The diff from the previous build of `name` to `digest` (default: the latest one);
    None when fewer than two builds have an SBOM."""
    history = sboms(store, name)
    if digest is not None:
        index = next((i for i, (d, _) in enumerate(history) if d == digest), None)
        if index is None:
            return None
        history = history[:index + 1]
    if len(history) < 2:
        return None
    (before, old), (after, new) = history[-2], history[-1]
    return diff_boms(old, new, before_name=str(before), after_name=str(after))


def diff_for_digest(store: EvidenceStore, digest: Digest | str) -> SbomDiff | None:
    """The SBOM diff of the image whose SBOM names `digest`, against its previous build."""
    wanted = str(digest)
    for key in store.keys():  # noqa: SIM118 - EvidenceStore.keys() is a method, not a dict
        if not key.startswith("name:sbom-"):
            continue
        name = key.removeprefix("name:")
        for record in store.attempts(name, KIND):
            result = store.result(record)
            if isinstance(result, SbomResult) and result.digest == wanted:
                return sbom_diff(store, result.image, Digest.parse(wanted))
    return None


def markdown_section(evidence_root: str, digest: str) -> list[str]:
    """`## Packages since the previous build` for `imagekit report` (md)."""
    out = ["\n## Packages since the previous build\n"]
    try:
        diff = diff_for_digest(EvidenceStore(evidence_root), digest)
    except (OSError, ValueError, InvalidInput):
        diff = None
    if diff is None:
        out.append("No evidence (needs the SBOMs of two builds: `imagekit attest`).")
        return out
    out.append(f"From `{diff.before}` to `{diff.after}`:\n")
    lines = diff.lines()
    out += [f"- `{line}`" for line in lines] or ["- no package changed"]
    return out
