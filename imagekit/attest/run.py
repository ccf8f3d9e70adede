"""The attest operations: make the statements for one digest (test-result, SBOM, the build's
SLSA provenance), sign them with the project key and attach them where the digest is served;
attach the promotion chain at every endpoint."""

from __future__ import annotations

from pathlib import Path

from imagekit.attest.keys import load_private
from imagekit.attest.models import Attached, AttestOutcome, HopLink
from imagekit.attest.publish import sign_and_attach
from imagekit.attest.statements import (
    PROMOTION_TYPE,
    SBOM_TYPE,
    TEST_RESULT_TYPE,
    promotion_predicate,
    signed_now,
    statement,
    test_result_statement,
)
from imagekit.errors import CheckFailed, NotFound
from imagekit.evidence import EvidenceStore
from imagekit.oci import ImageReference
from imagekit.oci.digest import Digest
from imagekit.oci.manifest import ImageManifest, parse_config, parse_manifest
from imagekit.registry import ClientPool, ManifestBlob, RegistryClient
from imagekit.results import CheckResult, Status


def report_of(store: EvidenceStore, digest: Digest, required: list[str] | None = None, *,
              spec_path: Path | None = None, state_dir: Path | None = None):
    """The evidence report for `digest`, None when the store knows nothing about it.
    `spec_path`/`state_dir`: the CLI's images spec and infra state (build_report)."""
    from imagekit.report.collect import build_report

    try:
        return build_report(store, digest, required=required, spec_path=spec_path,
                            state_dir=state_dir)
    except NotFound:
        return None


def test_result_for(store: EvidenceStore, digest: Digest, name: str,
                    required: list[str] | None = None, *, spec_path: Path | None = None,
                    state_dir: Path | None = None) -> dict:
    """`required`: the caller's required checks (its settings' $IMAGEKIT_REQUIRED_CHECKS), else
    the defaults; `spec_path`/`state_dir`: its images spec and infra state (report_of)."""
    report = report_of(store, digest, required, spec_path=spec_path, state_dir=state_dir)
    if report is None:  # an honest FAILED: nothing was tested
        return statement(digest, name, TEST_RESULT_TYPE, {
            "result": "FAILED", "configuration": [], "passedTests": [], "warnedTests": [],
            "failedTests": [f"evidence: no attempt about {digest}"],
            "timestamp": signed_now(), "acceptances": []})
    built = test_result_statement(report, digest, name)
    # what the image's own engine parser passed, so that a cluster accept on another
    # machine launches only a command this image parsed, from the signed facts alone
    from imagekit.clusteraccept.run import serve_args_records

    built["predicate"]["serveArgs"] = [report.model_dump(mode="json")
                                       for report, _ in serve_args_records(store, digest)
                                       if not report.signer]
    return built


def sbom_of(engine, image: str, digest: Digest, name: str) -> dict:
    """The CycloneDX document: pip inspect + dpkg status read by running `image` (pulled
    first when docker does not have it)."""
    from imagekit.sbom.bom import bom_from, collect

    if not engine.exists(image):
        engine.client.image.pull(image, quiet=True)
    pip, dpkg = collect(engine, image)
    return bom_from(digest, name, pip, dpkg)


def _served(client: RegistryClient, reference: ImageReference) -> ManifestBlob:
    return client.get_manifest(reference.repository, reference.digest or reference.identifier)


#: what `imagekit attest` signs unless `--type` names some
DEFAULT_KINDS = ("test-result", "sbom", "slsa-provenance")


def provenance_for(store: EvidenceStore, digest: Digest, name: str) -> dict | CheckResult:
    """The SLSA provenance statement of `digest`: BuildKit's statement as the build that pushed
    it recorded (its predicate unchanged), the subject `name`@`digest`. DEFERRED, with why,
    when no build of it recorded one: a provenance is never made up. InvalidInput when the
    recorded one is not SLSA v1 provenance."""
    from imagekit.provenance import signed_statement
    from imagekit.report.collect import recorded_provenance

    found = recorded_provenance(store, digest)
    if found is None:
        return CheckResult(name="slsa-provenance", status=Status.DEFERRED,
                           detail=f"no build of {digest} in {store.root} recorded a provenance "
                                  "(provenance.json, from BuildKit's --attest "
                                  "type=provenance): none signed")
    return signed_statement(found.data(), digest, name)


def attest_reference(reference: ImageReference, key_path: Path, *, store: EvidenceStore,
                     pool: ClientPool, engine=None, kinds: tuple[str, ...] = DEFAULT_KINDS,
                     required: list[str] | None = None, spec_path: Path | None = None,
                     state_dir: Path | None = None) -> AttestOutcome:
    """Sign and attach the test-result, the SBOM (with an engine) and the SLSA provenance (the
    build recorded it) statements of the digest `reference` serves; the provenance is DEFERRED
    where no build recorded one. `spec_path`/`state_dir`: the CLI's images spec and infra
    state."""
    key = load_private(key_path)
    client = pool.get(reference.registry)
    subject = _served(client, reference)
    name = f"{reference.registry}/{reference.repository}"
    bom = None
    if "sbom" in kinds and engine is not None:  # made (and judged) before anything is signed
        from imagekit.sbom.history import record_sbom

        bom = sbom_of(engine, f"{name}@{subject.digest}", subject.digest, name)
        record_sbom(store, name, subject.digest, bom)  # 0 components: recorded as FAIL
        if not bom.get("components"):
            raise CheckFailed("the SBOM has 0 components (the image has no python and no "
                              "dpkg database that could be read): nothing attested",
                              where=f"{name}@{subject.digest}")
    provenance = provenance_for(store, subject.digest, name) \
        if "slsa-provenance" in kinds else None
    attached = []
    if "test-result" in kinds:
        attached.append(sign_and_attach(client, reference.repository, subject,
                                        test_result_for(store, subject.digest, name, required,
                                                        spec_path=spec_path,
                                                        state_dir=state_dir),
                                        key))
    if bom is not None:
        attached.append(sign_and_attach(client, reference.repository, subject,
                                        statement(subject.digest, name, SBOM_TYPE, bom), key))
    if isinstance(provenance, dict):
        attached.append(sign_and_attach(client, reference.repository, subject, provenance,
                                        key))
    return AttestOutcome(attached=attached,
                         deferred=[provenance] if isinstance(provenance, CheckResult) else [])


def _identity(client: RegistryClient, repository: str, root: ManifestBlob
              ) -> tuple[str | None, list[str]]:
    """Config digest and diffIDs of an image manifest (an index has no single identity)."""
    parsed = parse_manifest(root.data, root.media_type)
    if not isinstance(parsed, ImageManifest):
        return None, []
    config = parse_config(client.get_blob_bytes(repository, parsed.config.digest,
                                                parsed.config.size))
    return str(parsed.config.digest), [str(d) for d in config.diff_ids]


def signed_lines_for(store: EvidenceStore, digest: Digest, report, trust) -> list:  # noqa: ANN001
    """Where this store measured nothing of the image itself: the lines of the newest test-result
    a trusted key signed about it (imagekit.report.trusted), each naming its signer."""
    from imagekit.report.gate import _image_phase
    from imagekit.report.trusted import TEST_RESULT_TYPE as TR
    from imagekit.report.trusted import lines_of, signed_statements

    if not trust or (report is not None and _image_phase(report.checks)):
        return []
    newest = next(iter(signed_statements(store, digest, trust)[0].get(TR) or []), None)
    return [line for line in lines_of(newest) if not line.accepted or newest.key.acceptances] \
        if newest is not None else []


def attest_promotion(result, key_path: Path, *, store: EvidenceStore, pool: ClientPool,
                     evidence: str | None = None, required=None, trust=None,  # noqa: ANN001
                     required_checks: list[str] | None = None, spec_path: Path | None = None,
                     state_dir: Path | None = None) -> list[Attached]:
    """The promotion chain for `result` (a PromoteResult): one statement whose subjects are the
    digest at every endpoint, signed and attached as a referrer at each endpoint. Its links
    come from this store, or from the statements trusted keys signed where it has none; a
    promotion forced past the gate is marked `forced` with the reason (verify fails it).
    `required`: the links required; `required_checks`: the checks the report requires;
    `spec_path`/`state_dir`: the CLI's images spec and infra state (report_of)."""
    key = load_private(key_path)
    digest = Digest.parse(result.digest)
    last = ImageReference.parse(result.hops[-1].endpoint)
    client = pool.get(last.registry)
    root = client.get_manifest(last.repository, digest)
    config_digest, diff_ids = _identity(client, last.repository, root)
    hops = [HopLink(endpoint=h.endpoint, digest=h.digest, verified=h.verified,
                    read_back=h.read_back, referrers=list(getattr(h, "referrers", []) or []))
            for h in result.hops]
    report = report_of(store, digest, required_checks, spec_path=spec_path,
                       state_dir=state_dir)
    gate = result.gate if isinstance(getattr(result, "gate", None), dict) else {}
    forced = None
    if gate.get("overridden"):
        forced = f"{gate.get('override_reason')} (refused for: " \
                 f"{'; '.join(gate.get('reasons') or [])[:600]})"
    predicate = promotion_predicate(digest, result.media_type, report=report,
                                    hops=hops, source=result.source,
                                    config_digest=config_digest, diff_ids=diff_ids,
                                    required=required, promote_evidence=evidence,
                                    signed_lines=signed_lines_for(store, digest, report, trust),
                                    root=str(store.root), forced=forced)
    endpoints = [ImageReference.parse(hop.endpoint) for hop in result.hops]
    signed = statement(digest, f"{endpoints[0].registry}/{endpoints[0].repository}",
                       PROMOTION_TYPE, predicate.model_dump(mode="json"))
    signed["subject"] = list({f"{e.registry}/{e.repository}": {
        "name": f"{e.registry}/{e.repository}",
        "digest": {digest.algorithm: digest.hex}} for e in endpoints}.values())
    attached = []
    for where in endpoints:
        here = pool.get(where.registry)
        attached.append(sign_and_attach(here, where.repository,
                                        here.get_manifest(where.repository, digest),
                                        signed, key))
    return attached
