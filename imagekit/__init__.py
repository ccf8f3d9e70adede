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

#: Where the documentation is read. Help and error messages link here, never to a path inside
#: a checkout, which a user of the wheel does not have. pyproject's [project.urls]
#: Documentation is this folder's README.md (tests/unit/test_cli_docs.py holds them equal).
DOCS_URL = "https://github.com/imagekit/imagekit/blob/main/docs/"

#: What this release is tested with, in one place: `imagekit --version` prints it, and
#: tests/unit/test_version.py holds each entry to the pin it comes from (the kubernetes client's
#: API release and the local cluster's build; the engines the stand-ins and tests install).
SUPPORTED: dict[str, str] = {
    "Kubernetes": "1.20 to 1.37",
    "vLLM": "0.32",
    "SGLang": "0.5",
    "transformers serve": "5.17",
}


def doc_url(page: str, anchor: str = "") -> str:
    """The address of a documentation page: `doc_url("commands")` is DOCS_URL + commands.md,
    `doc_url("reference/trust-policy")` a page under reference/."""
    return f"{DOCS_URL}{page}.md" + (f"#{anchor}" if anchor else "")
