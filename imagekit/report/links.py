"""The links of the promotion chain and the evidence kinds each is read from (the promotion
predicate, `imagekit verify-attestations --require-link LINK`, and the gate's check that a
signed chain covers only links the store really holds)."""

from __future__ import annotations

#: link name -> evidence kinds it is read from (a kind ending in '-' is a family prefix)
LINK_KINDS: dict[str, tuple[str, ...]] = {
    "base-identity": ("images-verify", "verify-mirror", "verify-copy"),
    "build": ("build", "provenance"),
    "probes": ("probe",),
    "cluster-imageid": ("cluster-probe",),
    "gpu-preflight": ("gpu-preflight",),
    "acceptance": ("accept-",),
}
OPTIONAL_LINKS = ("gpu-preflight", "acceptance")
#: links made after promotion (by the promotion itself, or on the cluster it feeds): a chain
#: signed at promotion time cannot hold them yet
LATER_LINKS = ("hops", "cluster-imageid", "gpu-preflight", "acceptance")


def of_link(kind: str, link: str) -> bool:
    """Whether evidence of `kind` shows `link` (a link not listed stands for its own kind)."""
    return any(kind == k or (k.endswith("-") and kind.startswith(k))
               for k in LINK_KINDS.get(link, (link,)))
