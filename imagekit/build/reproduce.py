"""Two builds of one commit, compared: equal image manifest digests, or where they part.

A differing build is explained the way diffoci and container-diff do it: the config fields
that differ, then the first layer whose content (diffID) differs, and inside it, member by
member, the paths only one side has and the paths whose bytes or metadata differ (size,
sha256, mode, owner, mtime, link). Layers with equal diffIDs but other compressed bytes are
a compression difference, named as such. Only the first differing layer is opened: a later
layer usually differs for the same reason, and each one costs a full read.

Bounded: a member's bytes are hashed as a stream, the listing keeps at most `limit` paths
(the rest counted), and a layer is read once per side."""

from __future__ import annotations

import gzip
import hashlib
import tarfile
from pathlib import Path
from typing import BinaryIO, Literal, cast

from pydantic import BaseModel, Field

from imagekit.build.layout import LayoutImage, platform_image
from imagekit.oci import mediatypes

#: how many differing paths a verdict lists (the rest are counted, not named)
LISTING_LIMIT = 200
_CHUNK = 1024 * 1024


class Member(BaseModel):
    """One tar member as the comparison sees it."""

    type: str
    mode: int
    uid: int
    gid: int
    size: int
    mtime: int
    linkname: str = ""
    sha256: str | None = None  # regular files only
    pax: dict[str, str] = Field(default_factory=dict)


class MemberDifference(BaseModel):
    path: str
    change: Literal["only-in-first", "only-in-second", "content", "metadata"]
    fields: list[str] = Field(default_factory=list)  # what differs (content: size, sha256)
    first: Member | None = None
    second: Member | None = None


class LayerDifference(BaseModel):
    """The first layer whose content differs, and how."""

    index: int
    first_layer: str
    second_layer: str
    same_content: bool  # equal diffIDs: only the compression differs
    members: list[MemberDifference] = Field(default_factory=list)
    more: int = 0  # differing paths not listed (past the listing limit)
    order_differs: bool = False  # the same members, in another order


class ReproductionDiff(BaseModel):
    """What two builds of the same inputs gave (imagekit images verify --rebuild)."""

    first: str
    second: str
    equal: bool
    config_fields: list[str] = Field(default_factory=list)
    layer_count: tuple[int, int]
    layer: LayerDifference | None = None

    def summary(self) -> str:
        if self.equal:
            return f"both builds gave {self.first}"
        parts = [f"{self.first} vs {self.second}"]
        if self.config_fields:
            parts.append(f"config differs in {', '.join(self.config_fields)}")
        if self.layer is not None:
            layer = self.layer
            if layer.same_content:
                parts.append(f"layer {layer.index} has the same content, other compressed "
                             "bytes")
            else:
                shown = [f"{m.path} ({m.change}{': ' + ', '.join(m.fields) if m.fields else ''})"
                         for m in layer.members[:5]]
                count = len(layer.members) + layer.more
                parts.append(f"layer {layer.index} differs in {count} path(s): "
                             f"{'; '.join(shown)}{' …' if count > 5 else ''}")
        elif self.layer_count[0] != self.layer_count[1]:
            parts.append(f"{self.layer_count[0]} vs {self.layer_count[1]} layers")
        return ", ".join(parts)


def compare_layouts(first: Path, second: Path, limit: int = LISTING_LIMIT) -> ReproductionDiff:
    """Compare the linux/amd64 images of two OCI layouts."""
    a, b = platform_image(first), platform_image(second)
    diff = ReproductionDiff(first=str(a.digest), second=str(b.digest), equal=a.digest == b.digest,
                            layer_count=(len(a.layers), len(b.layers)))
    if diff.equal:
        return diff
    diff.config_fields = sorted(
        key for key in set(a.config) | set(b.config) if a.config.get(key) != b.config.get(key))
    for index, (layer_a, layer_b) in enumerate(zip(a.layers, b.layers, strict=False)):
        if layer_a == layer_b:
            continue
        same = index < min(len(a.diff_ids), len(b.diff_ids)) and \
            a.diff_ids[index] == b.diff_ids[index]
        found = LayerDifference(index=index, first_layer=str(layer_a),
                                second_layer=str(layer_b), same_content=same)
        if not same:
            _list_members(found, a, b, index, limit)
        diff.layer = found
        break
    return diff


def _media_type(image: LayoutImage, index: int) -> str:
    return str(image.manifest["layers"][index].get("mediaType", mediatypes.OCI_LAYER_GZIP))


def _members(image: LayoutImage, index: int) -> tuple[dict[str, Member], list[str]]:
    """path -> member of one layer, and the order the tar holds them in."""
    path = image.blob(image.layers[index])
    compression = mediatypes.layer_compression(_media_type(image, index))
    found: dict[str, Member] = {}
    order: list[str] = []
    with path.open("rb") as blob, _decompressed(blob, compression) as raw, \
            tarfile.open(fileobj=raw, mode="r|") as tar:
        for info in tar:
            digest = None
            if info.isreg():
                stream = tar.extractfile(info)
                assert stream is not None
                h = hashlib.sha256()
                while chunk := stream.read(_CHUNK):
                    h.update(chunk)
                digest = h.hexdigest()
            name = info.name.removeprefix("./")
            found[name] = Member(type=_kind(info), mode=info.mode, uid=info.uid, gid=info.gid,
                                 size=info.size, mtime=int(info.mtime), linkname=info.linkname,
                                 sha256=digest, pax={k: str(v) for k, v in
                                                     sorted(info.pax_headers.items())})
            order.append(name)
    return found, order


def _decompressed(blob: BinaryIO, compression: str) -> BinaryIO:
    if compression == "zstd":
        import zstandard

        return cast(BinaryIO, zstandard.ZstdDecompressor().stream_reader(blob))
    if compression == "gzip":
        return cast(BinaryIO, gzip.GzipFile(fileobj=blob, mode="rb"))
    return blob


def _kind(info: tarfile.TarInfo) -> str:
    for test, name in ((info.isreg, "file"), (info.isdir, "dir"), (info.issym, "symlink"),
                       (info.islnk, "hardlink"), (info.ischr, "char"), (info.isblk, "block"),
                       (info.isfifo, "fifo")):
        if test():
            return name
    return "other"


def _list_members(found: LayerDifference, a: LayoutImage, b: LayoutImage, index: int,
                  limit: int) -> None:
    first, first_order = _members(a, index)
    second, second_order = _members(b, index)
    differences: list[MemberDifference] = []
    for path in sorted(set(first) | set(second)):
        x, y = first.get(path), second.get(path)
        if x is None or y is None:
            differences.append(MemberDifference(
                path=path, change="only-in-second" if x is None else "only-in-first",
                first=x, second=y))
            continue
        fields = [name for name in Member.model_fields if getattr(x, name) != getattr(y, name)]
        if not fields:
            continue
        change: Literal["content", "metadata"] = \
            "content" if {"sha256", "size", "linkname"} & set(fields) else "metadata"
        differences.append(MemberDifference(path=path, change=change, fields=fields,
                                            first=x, second=y))
    found.members = differences[:limit]
    found.more = max(0, len(differences) - limit)
    found.order_differs = not differences and first_order != second_order
