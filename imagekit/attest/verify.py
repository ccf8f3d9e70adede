"""`imagekit verify REF`: what a consumer at any endpoint can prove with the registry and the
public key alone.

1. the reference is resolved at the registry (a tag to the digest it serves; the manifest
   bytes hashed);
2. every Sigstore-bundle referrer of that digest is read (manifest and bundle re-hashed: a
   changed byte is a FAIL naming the blob), its DSSE signature verified with the key, its
   statement's subject compared with the served digest;
3. every required predicate type must be there (test-result, promotion, sbom by default);
4. the promotion predicate is re-checked: its digest = the served digest, every required link
   PASS (a link the signer's profile accepted counts, its reason is shown), every hop verified.
Exit 0 all PASS, 1 any FAIL, 2 bad input.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from imagekit.attest.dsse import BUNDLE_MEDIA_TYPE, EnvelopeError, envelope_of_bundle, \
    verify_envelope
from imagekit.attest.keys import load_public
from imagekit.attest.models import AttestVerifyReport, PromotionPredicate
from imagekit.attest.statements import NAMES, PROMOTION_TYPE, TEST_RESULT_TYPE, TYPES
from imagekit.errors import DigestMismatch, ImagekitError, InvalidInput, NotFound
from imagekit.oci import ImageReference
from imagekit.oci.digest import Digest
from imagekit.registry import ClientPool, RegistryClient
from imagekit.oci.referrers import parse_manifest as parse_referrer_manifest
from imagekit.registry.referrers import list_referrers
from imagekit.results import CheckResult, Status, overall

DEFAULT_TYPES = ("test-result", "promotion", "sbom")


def type_uri(name: str) -> str:
    if name in TYPES:
        return TYPES[name]
    if "://" in name:
        return name
    raise InvalidInput(f"unknown attestation type {name!r} (known: {', '.join(TYPES)} or a "
                       "predicate type URI)", where="--type")


def _label(predicate_type: str) -> str:
    return NAMES.get(predicate_type, predicate_type)


def read_attestations(client: RegistryClient, repository: str, digest: Digest, key
                      ) -> tuple[list[dict], list[CheckResult]]:
    """Every bundle referrer of `digest`: (verified statements with where they came from,
    one check per referrer)."""
    found: list[dict] = []
    checks: list[CheckResult] = []
    for entry in list_referrers(client, repository, digest):
        try:
            referrer = Digest.parse(entry.get("digest", ""))
        except InvalidInput:
            checks.append(CheckResult(name="referrer", status=Status.FAIL,
                                      detail=f"referrers list names no digest: {entry}"))
            continue
        annotated = (entry.get("annotations") or {}).get("dev.sigstore.bundle.predicateType")
        label = f"attestation {_label(annotated) if annotated else '?'} {referrer.short}"
        try:
            manifest_blob = client.get_manifest(repository, referrer)
            manifest = parse_referrer_manifest(  # bounded, strict: the registry's word
                manifest_blob.data, f"{client.registry}/{repository}@{referrer}").dump()
            annotated = (manifest.get("annotations") or {}).get(
                "dev.sigstore.bundle.predicateType", annotated)
            label = f"attestation {_label(annotated) if annotated else '?'} {referrer.short}"
            layers = [layer for layer in manifest.get("layers") or []
                      if layer.get("mediaType") == BUNDLE_MEDIA_TYPE]
            if manifest.get("artifactType") != BUNDLE_MEDIA_TYPE and not layers:
                continue  # another kind of referrer (a signature, an SBOM file): not ours
            if (manifest.get("subject") or {}).get("digest") != str(digest):
                raise EnvelopeError("its manifest's subject is not the served digest")
            if len(layers) != 1:
                raise EnvelopeError(f"{len(layers)} bundle layers, expected 1")
            layer = Digest.parse(layers[0]["digest"])
            try:
                data = client.get_blob_bytes(repository, layer, layers[0].get("size"))
            except DigestMismatch:
                raise EnvelopeError(f"bundle blob {layer} does not hash to its digest "
                                    "(changed at the registry)") from None
            statement = verify_envelope(envelope_of_bundle(data), key)
            subjects = [s.get("digest", {}).get(digest.algorithm)
                        for s in statement.get("subject") or []]
            if digest.hex not in subjects:
                raise EnvelopeError("the signed statement's subject is not the served digest")
            predicate_type = statement.get("predicateType", "")
            if annotated and annotated != predicate_type:
                raise EnvelopeError(f"annotated as {annotated} but signs {predicate_type}")
        except (EnvelopeError, NotFound, ImagekitError, ValueError, KeyError) as exc:
            message = exc.one_line() if isinstance(exc, ImagekitError) else str(exc)
            checks.append(CheckResult(name=label, status=Status.FAIL, detail=message,
                                      data={"referrer": str(referrer)}))
            continue
        found.append({"type": predicate_type, "referrer": str(referrer), "bundle": str(layer),
                      "statement": statement})
        checks.append(CheckResult(name=f"attestation {_label(predicate_type)} "
                                       f"{referrer.short}", status=Status.PASS,
                                  detail="signature verified with the public key; subject = "
                                         "served digest",
                                  data={"referrer": str(referrer)}))
    return found, checks


def check_test_result(statement: dict) -> CheckResult:
    """PASSED passes; WARNED passes as the promotion gate lets it (only DEFERRED or
    profile-accepted lines, named here); FAILED fails with its failed tests."""
    predicate = statement.get("predicate") or {}
    result = predicate.get("result")
    if result == "PASSED":
        return CheckResult(name="test-result", status=Status.PASS, detail="PASSED")
    if result == "WARNED":
        return CheckResult(name="test-result", status=Status.PASS,
                           detail="WARNED (gate warnings, no failure): "
                                  + ", ".join(predicate.get("warnedTests") or [])[:400])
    return CheckResult(name="test-result", status=Status.FAIL,
                       detail=f"{result}: " + ", ".join(predicate.get("failedTests") or [])[:400])


def check_promotion(statement: dict, digest: Digest, require: Iterable[str] = ()
                    ) -> list[CheckResult]:
    """The joined chain re-checked: subject, required links PASS, every hop verified."""
    try:
        predicate = PromotionPredicate.model_validate(statement.get("predicate"))
    except ValueError as exc:
        return [CheckResult(name="promotion predicate", status=Status.FAIL,
                            detail=f"not a promotion predicate: {str(exc)[:300]}")]
    checks = [CheckResult(
        name="promotion subject",
        status=Status.PASS if predicate.digest == str(digest) else Status.FAIL,
        detail=f"predicate names {predicate.digest}, served {digest}")]
    links = {link.name: link for link in predicate.links}
    for name in dict.fromkeys([*predicate.required, *require]):
        link = links.get(name)
        if link is None:
            checks.append(CheckResult(name=f"link {name}", status=Status.FAIL,
                                      detail="missing link: the predicate has no such link"))
            continue
        ok = link.status == "PASS"
        detail = f"{link.status}: {link.detail}" + \
            (f" (accepted by the profile: {link.accepted})" if link.accepted else "")
        checks.append(CheckResult(name=f"link {name}", status=Status.PASS if ok else Status.FAIL,
                                  detail=detail[:500]))
    bad_hops = [h.endpoint for h in predicate.hops if not h.verified or h.digest != str(digest)]
    if bad_hops:
        checks.append(CheckResult(name="hops", status=Status.FAIL,
                                  detail=f"hop(s) not verified for {digest}: "
                                         f"{', '.join(bad_hops)}"))
    return checks


def verify_reference(reference: ImageReference, public_key: Path, *,
                     types: Iterable[str] = DEFAULT_TYPES, require: Iterable[str] = (),
                     pool: ClientPool | None = None) -> AttestVerifyReport:
    key = load_public(public_key)
    wanted = [type_uri(t) for t in types]
    own = pool is None
    pool = pool or ClientPool()
    try:
        client = pool.get(reference.registry)
        served = client.get_manifest(reference.repository,
                                     reference.digest or reference.identifier)
        checks: list[CheckResult] = []
        if reference.digest is None:
            checks.append(CheckResult(name="resolve", status=Status.PASS,
                                      detail=f"{reference.identifier} -> {served.digest}"))
        found, read = read_attestations(client, reference.repository, served.digest, key)
        checks += read
        for uri in wanted:
            mine = [f for f in found if f["type"] == uri]
            if not mine:
                checks.append(CheckResult(name=f"attestation {_label(uri)}",
                                          status=Status.FAIL,
                                          detail=f"missing attestation: no verified "
                                                 f"{uri} statement for {served.digest}"))
        for item in found:
            if item["type"] == PROMOTION_TYPE:
                checks += check_promotion(item["statement"], served.digest, require)
            if item["type"] == TEST_RESULT_TYPE:
                checks.append(check_test_result(item["statement"]))
        attestations = [{"type": f["type"], "referrer": f["referrer"], "bundle": f["bundle"]}
                        for f in found]
        return AttestVerifyReport(reference=str(reference), digest=str(served.digest),
                                  status=overall(checks), attestations=attestations,
                                  checks=checks)
    finally:
        if own:
            pool.close()
