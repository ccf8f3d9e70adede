"""CycloneDX SBOMs of images and their diff against the previous build.

Its own operation package (below `report` and `attest`): the report renders the diff and the
attestations sign the SBOM, and neither may import the other's layer upward."""

from imagekit.sbom.bom import SbomDiff, bom_from, diff_boms, packages_of
from imagekit.sbom.history import record_sbom, sbom_diff, sboms

__all__ = ["SbomDiff", "bom_from", "diff_boms", "packages_of", "record_sbom", "sbom_diff",
           "sboms"]
