"""imagekit: fixed, verified, promoted inference-server images, with evidence keyed by digest.

Layers (a lower layer never imports a higher one):
  1. types      imagekit.errors, imagekit.oci, imagekit.results, imagekit.evidence
  2. transports imagekit.registry (HTTP), imagekit.engine (docker), imagekit.cluster (kubernetes)
  3. operations imagekit.infra, imagekit.verify, imagekit.build, imagekit.probe, imagekit.promote,
                imagekit.acceptance, imagekit.report
  4. CLI        imagekit.cli
"""

#: the version, in one place: pyproject reads it (dynamic), `imagekit --version` shows it, every
#: evidence attempt's context and every attestation statement carry it
__version__ = "0.1.0"
