"""`imagekit verify-attestations REF`: what a consumer at any endpoint can prove with the
registry and the public key alone.

1. the reference is resolved at the registry (a tag to the digest it serves; the manifest
   bytes hashed);
2. every Sigstore-bundle referrer of that digest is read (manifest and bundle re-hashed: a
   changed byte is a FAIL naming the blob), its DSSE signature verified with the key, its
   statement's subject compared with the served digest;
3. every required predicate type must be there (test-result, promotion, sbom by default);
4. the promotion predicate is re-checked: its digest = the served digest, every required link
   PASS (a link the signer's profile accepted counts, its reason is shown), every hop verified;
5. a required slsa-provenance is re-checked against the images spec: the base BuildKit resolved
   is the lock's digest, the Dockerfile it parsed is the checkout's (imagekit.provenance).
Exit 0 all PASS, 1 any FAIL, 2 bad input.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from imagekit.attest.dsse import (
    BUNDLE_MEDIA_TYPE,
    EnvelopeError,
    envelope_of_bundle,
    verify_envelope,
)
from imagekit.attest.models import AttestVerifyReport, PromotionPredicate
from imagekit.attest.statements import (
    NAMES,
    PHASE_TYPES,
    PROMOTION_TYPE,
    SLSA_PROVENANCE_TYPE,
    TEST_RESULT_TYPE,
    TYPES,
)
from imagekit.errors import DigestMismatch, ImagekitError, InvalidInput, NotFound, TransportError
from imagekit.oci import ImageReference
from imagekit.oci.digest import Digest
from imagekit.oci.referrers import parse_manifest as parse_referrer_manifest
from imagekit.registry import ClientPool, RegistryClient
from imagekit.registry.referrers import list_referrers
from imagekit.results import CheckResult, Status, overall
from imagekit.trust.policy import (
    TrustedKey,
    TrustPolicy,
    fingerprint_of_hint,
    signed_time,
    signer_label,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ec

    from imagekit.spec import ResolvedImage

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


class Untrusted(Exception):
    """The bundle is signed by a key the trust policy does not hold (or not for this type):
    named and ignored, never a FAIL (cosign's semantics)."""


def verify_trusted(data: bytes, trust: TrustPolicy) -> tuple[dict, TrustedKey]:
    """(statement, signer) of a bundle whose signature verifies with a trusted key.

    The bundle's key hint picks the key: a hint naming a trusted key whose signature does not
    verify is a changed bundle (EnvelopeError: refused); a hint naming no trusted key, or no
    hint and no trusted key verifying, is another signer's (Untrusted: ignored)."""
    envelope = envelope_of_bundle(data)
    try:
        hint = json.loads(data)["verificationMaterial"]["publicKey"]["hint"]
        hint = hint if isinstance(hint, str) else None
    except (ValueError, KeyError, TypeError):
        hint = None
    named = trust.by_hint(hint)
    if named:
        for key in named:
            try:
                return verify_envelope(envelope, key.public_key), key
            except EnvelopeError as exc:
                failure = exc
        raise EnvelopeError(f"signed with the key hint of {named[0].label}, but the signature "
                            f"does not verify with it ({failure}): changed at the registry")
    for key in trust.keys:   # no hint, or one another tool spelled otherwise: try each key
        try:
            return verify_envelope(envelope, key.public_key), key
        except EnvelopeError as exc:
            if "no signature verifies" not in str(exc):
                raise
    fingerprint = fingerprint_of_hint(hint) if hint else None
    raise Untrusted(signer_label(None, fingerprint) if fingerprint else
                    f"key hint {hint[:12]}…" if hint else
                    "no key hint, and no trusted key verifies it")


def read_attestations(client: RegistryClient, repository: str, digest: Digest,
                      key: TrustPolicy | ec.EllipticCurvePublicKey
                      ) -> tuple[list[dict], list[CheckResult]]:
    """Every bundle referrer of `digest`: (statements verified with a trusted key, with where
    they came from and who signed them; one check per referrer). A bundle of another signer
    is a PASS line saying it was ignored (`data.ignored`); a FAIL line's `data.problem` is
    `unavailable` (missing or unreadable: that statement is no evidence) or `refused`
    (changed, about another digest: the verdict refuses)."""
    trust = key if isinstance(key, TrustPolicy) else _one_key(key)
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
            except DigestMismatch as exc:
                if "truncated" in exc.message:   # no evidence from it, named
                    raise EnvelopeError(f"bundle blob {layer} is truncated at the registry "
                                        f"({exc.message.split(': ', 1)[-1]})") from None
                raise EnvelopeError(f"bundle blob {layer} does not hash to its digest "
                                    "(changed at the registry)") from None
            statement, signer = verify_trusted(data, trust)
            subjects = [s.get("digest", {}).get(digest.algorithm)
                        for s in statement.get("subject") or []]
            if digest.hex not in subjects:
                raise EnvelopeError("the signed statement's subject is not the served digest")
            predicate_type = statement.get("predicateType", "")
            if annotated and annotated != predicate_type:
                raise EnvelopeError(f"annotated as {annotated} but signs {predicate_type}")
        except Untrusted as exc:
            checks.append(CheckResult(name=f"{label} ignored", status=Status.PASS,
                                      detail=f"signed by a key that is not trusted ({exc}): "
                                             "ignored, as cosign does",
                                      data={"referrer": str(referrer), "ignored": True}))
            continue
        except (EnvelopeError, NotFound, ImagekitError, ValueError, KeyError) as exc:
            message = exc.one_line() if isinstance(exc, ImagekitError) else str(exc)
            problem = "unavailable" if isinstance(exc, (NotFound, TransportError)) or \
                "truncated" in message else "refused"
            checks.append(CheckResult(name=label, status=Status.FAIL, detail=message,
                                      data={"referrer": str(referrer), "problem": problem}))
            continue
        if not signer.allows_type(predicate_type):
            checks.append(CheckResult(
                name=f"attestation {_label(predicate_type)} {referrer.short} ignored",
                status=Status.PASS, detail=f"signed by {signer.label}, who is not trusted for "
                f"{_label(predicate_type)} statements: ignored",
                data={"referrer": str(referrer), "ignored": True}))
            continue
        found.append({"type": predicate_type, "referrer": str(referrer), "bundle": str(layer),
                      "statement": statement, "signer": signer.name,
                      "fingerprint": signer.fingerprint, "label": signer.label,
                      "signed_at": signed_time(statement)})
        checks.append(CheckResult(name=f"attestation {_label(predicate_type)} "
                                       f"{referrer.short}", status=Status.PASS,
                                  detail=f"signature verified with {signer.label}; subject = "
                                         "served digest",
                                  data={"referrer": str(referrer), "signer": signer.name,
                                        "fingerprint": signer.fingerprint}))
    return found, checks


def _one_key(key) -> TrustPolicy:  # noqa: ANN001 - an EllipticCurvePublicKey
    from imagekit.trust.policy import _key

    return TrustPolicy(keys=[_key(key, name="key", source="public key")])


def acceptances_of(statement: dict) -> list[dict]:
    """The acceptances the signer's profile applied, as signed: `{test, status, reason,
    profile, spec_digest}` per accepted line (attest/statements.py)."""
    raw = statement.get("predicate")
    predicate: dict = raw if isinstance(raw, dict) else {}
    found = predicate.get("acceptances")
    if not isinstance(found, list):
        return []
    return [a for a in found if isinstance(a, dict) and isinstance(a.get("test"), str)]


def check_test_result(statement: dict, *, honour_acceptances: bool = False,
                      signer: str = "") -> CheckResult:
    """PASSED passes; WARNED passes as the promotion gate lets it (only DEFERRED or
    profile-accepted lines, named here); FAILED fails with its failed tests — unless every
    failed test is one the signer's profile accepted and the trust policy honours that
    signer's acceptances (then PASS, each acceptance named with its reason and profile)."""
    predicate = statement.get("predicate") or {}
    result = predicate.get("result")
    by = f" (signed by {signer})" if signer else ""
    if result == "PASSED":
        return CheckResult(name="test-result", status=Status.PASS, detail="PASSED" + by)
    if result == "WARNED":
        return CheckResult(name="test-result", status=Status.PASS,
                           detail="WARNED (gate warnings, no failure): "
                                  + ", ".join(predicate.get("warnedTests") or [])[:400] + by)
    failed = [str(t) for t in predicate.get("failedTests") or []]
    accepted = {a["test"]: a for a in acceptances_of(statement)}
    if honour_acceptances and result == "FAILED" and failed and \
            all(t in accepted for t in failed):
        named = "; ".join(f"{t} {accepted[t].get('status', '?')} accepted by profile "
                          f"{accepted[t].get('profile', '?')}: {accepted[t].get('reason', '')}"
                          for t in failed)
        return CheckResult(name="test-result", status=Status.PASS,
                           detail=f"FAILED only on accepted lines{by}: {named}"[:800])
    unaccepted = [t for t in failed if not (honour_acceptances and t in accepted)]
    note = "" if honour_acceptances or not accepted else \
        " (the signer's acceptances are not honoured for this key)"
    return CheckResult(name="test-result", status=Status.FAIL,
                       detail=f"{result}{by}: " + ", ".join(unaccepted)[:400] + note)


def link_shown_by_tests(statement: dict, link: str, *, honour_acceptances: bool) -> CheckResult:
    """`--require-link LINK` read from a test-result statement: the tests of that link's kinds
    (LINK_KINDS; a kind name works too) are there and none fails (an honoured acceptance
    counts)."""
    from imagekit.attest.statements import LINK_KINDS

    kinds = LINK_KINDS.get(link, (link,))
    predicate = statement.get("predicate") or {}
    accepted = {a["test"] for a in acceptances_of(statement)} if honour_acceptances else set()

    def of_link(test: str) -> bool:
        kind = test.split(":", 1)[0]
        return any(kind == k or (k.endswith("-") and kind.startswith(k)) for k in kinds)

    passed = [t for t in predicate.get("passedTests") or [] if isinstance(t, str) and of_link(t)]
    failed = [t for t in (predicate.get("failedTests") or []) +
              (predicate.get("warnedTests") or [])
              if isinstance(t, str) and of_link(t) and t not in accepted]
    taken = [t for t in (predicate.get("failedTests") or []) +
             (predicate.get("warnedTests") or [])
             if isinstance(t, str) and of_link(t) and t in accepted]
    if failed:
        return CheckResult(name=f"required {link} (test-result)", status=Status.FAIL,
                           detail=f"not PASS in the test-result: {', '.join(failed)[:400]}")
    if not passed:
        return CheckResult(name=f"required {link} (test-result)", status=Status.FAIL,
                           detail=f"missing: the test-result has no test of {link} "
                                  f"(kinds {', '.join(kinds)})")
    # an accepted test is counted as accepted, never inside the PASS count
    return CheckResult(name=f"required {link} (test-result)", status=Status.PASS,
                       detail=f"{len(passed)} PASS" + (f", {len(taken)} accepted "
                                                       f"({', '.join(taken)})" if taken else ""))


def newest(found: list[dict]) -> tuple[dict | None, list[dict]]:
    """The newest statement by the time signed inside it (never the index order), and the
    others (superseded). An undated statement is older than any dated one."""
    if not found:
        return None, []
    ordered = sorted(found, key=lambda f: (f.get("signed_at") or "", f["referrer"]))
    return ordered[-1], ordered[:-1]


#: The links a phase after the promotion shows, and the phase whose signed statement shows
#: each: a chain signed at promotion time holds them as ABSENT (report.links.LATER_LINKS).
LATER_PHASES = {"cluster-imageid": "cluster-probe", "gpu-preflight": "gpu-preflight",
                "acceptance": "cluster-accept"}


def later_links(found: list[dict], digest: Digest,
                trust: TrustPolicy) -> dict[str, CheckResult]:
    """Per later link, what the newest trusted phase statement about `digest` shows: PASS
    when its verdict (the signer's profile applied) is PASS for the digest it was pinned to."""
    from imagekit.attest.phase import ClusterPhasePredicate

    shown: dict[str, CheckResult] = {}
    for link, phase in LATER_PHASES.items():
        item, _ = newest([f for f in found if f["type"] == PHASE_TYPES[phase]])
        if item is None:
            continue
        signer = trust.by_fingerprint(item["fingerprint"])
        if signer is not None and not signer.allows_link(link):
            shown[link] = CheckResult(name=f"link {link}", status=Status.FAIL,
                                      detail=f"{signer.label} is not trusted to vouch for "
                                             f"link {link} (trust policy `links`)")
            continue
        try:
            predicate = ClusterPhasePredicate.model_validate(item["statement"].get("predicate"))
        except ValueError as exc:
            shown[link] = CheckResult(name=f"link {link}", status=Status.FAIL,
                                      detail=f"not a {phase} predicate: {str(exc)[:300]}")
            continue
        ok = predicate.verdict is Status.PASS and predicate.digest == str(digest)
        shown[link] = CheckResult(
            name=f"link {link}", status=Status.PASS if ok else Status.FAIL,
            detail=f"shown after promotion by the {phase} statement signed by {item['label']} "
                   f"at {item.get('signed_at') or 'an unknown time'}: verdict "
                   f"{predicate.verdict.value} for {predicate.digest}"
                   + (f" on node {predicate.node}" if predicate.node else ""))
    return shown


def check_promotion(statement: dict, digest: Digest, require: Iterable[str] = (),
                    signer: TrustedKey | None = None,
                    later: dict[str, CheckResult] | None = None) -> list[CheckResult]:
    """The joined chain re-checked: subject, required links PASS (each one the signer may
    vouch for), every hop verified; a chain signed past the gate (`forced`) or requiring no
    link at all proves nothing and fails. A link the chain could not hold yet when it was
    signed (ABSENT: the cluster probe runs after promotion) is shown by `later`: the trusted
    phase statements about the digest (`later_links`)."""
    try:
        predicate = PromotionPredicate.model_validate(statement.get("predicate"))
    except ValueError as exc:
        return [CheckResult(name="promotion predicate", status=Status.FAIL,
                            detail=f"not a promotion predicate: {str(exc)[:300]}")]
    checks = [CheckResult(
        name="promotion subject",
        status=Status.PASS if predicate.digest == str(digest) else Status.FAIL,
        detail=f"predicate names {predicate.digest}, served {digest}")]
    if predicate.forced is not None:
        checks.append(CheckResult(name="promotion forced", status=Status.FAIL,
                                  detail=f"signed past a refusing gate by --force: "
                                         f"{predicate.forced}"[:500]))
    wanted = list(dict.fromkeys([*predicate.required, *require]))
    if not wanted:
        checks.append(CheckResult(name="promotion links", status=Status.FAIL,
                                  detail="the signer required no link: the chain proves "
                                         "nothing (IMAGEKIT_REQUIRED_LINKS was empty)"))
    links = {link.name: link for link in predicate.links}
    for name in wanted:
        link = links.get(name)
        if link is None:
            checks.append(CheckResult(name=f"link {name}", status=Status.FAIL,
                                      detail="missing link: the predicate has no such link"))
            continue
        if signer is not None and not signer.allows_link(name):
            checks.append(CheckResult(name=f"link {name}", status=Status.FAIL,
                                      detail=f"{signer.label} is not trusted to vouch for "
                                             f"link {name} (trust policy `links`)"))
            continue
        if link.status == "ABSENT" and later and name in later:
            checks.append(later[name])
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


def check_slsa_provenance(statement: dict, digest: Digest,
                          image: ResolvedImage | str | None, signer: str) -> list[CheckResult]:
    """The provenance check (imagekit.provenance) of a trusted slsa-provenance statement:
    subject, base against the lock, Dockerfile against the checkout of `image` (the spec's
    image, or why it could not be told: base and Dockerfile DEFERRED)."""
    from imagekit.provenance import check_provenance

    checks = check_provenance(statement, digest, image if image is not None else
                              "no images spec to check the provenance against")
    return [check.model_copy(update={"name": f"slsa-provenance {check.name}",
                                     "detail": f"{check.detail} (signed by {signer})"[:800]})
            for check in checks]


def verify_reference(reference: ImageReference, trust: TrustPolicy | Path, *,
                     types: Iterable[str] = DEFAULT_TYPES, require: Iterable[str] = (),
                     pool: ClientPool | None = None,
                     provenance_image: ResolvedImage | str | None = None
                     ) -> AttestVerifyReport:
    """`trust`: the trusted keys (a public key file stands for one key trusted for all).
    Bundles of other signers are named and ignored; per predicate type the NEWEST trusted
    statement (by the time signed inside it) decides; every `--require-link` link must be shown
    PASS by the checked types that can show it (test-result, promotion). A required
    slsa-provenance is checked against `provenance_image`: the spec's image REF is, its base
    pinned by the lock (or why it could not be told)."""
    if not isinstance(trust, TrustPolicy):
        from imagekit.trust.policy import single_key
        trust = single_key(Path(trust))
    wanted = [type_uri(t) for t in types]
    require = list(dict.fromkeys(r for r in require if r))
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
        found, read = read_attestations(client, reference.repository, served.digest, trust)
        checks += read
        shown: dict[str, list[CheckResult]] = {r: [] for r in require}
        used: list[dict] = []
        for uri in wanted:
            item, older = newest([f for f in found if f["type"] == uri])
            if item is None:
                checks.append(CheckResult(name=f"attestation {_label(uri)}",
                                          status=Status.FAIL,
                                          detail=f"missing attestation: no verified "
                                                 f"{uri} statement for {served.digest}"))
                continue
            used.append(item)
            for old in older:
                checks.append(CheckResult(
                    name=f"attestation {_label(uri)} {old['referrer'][7:19]} superseded",
                    status=Status.PASS,
                    detail=f"signed {old.get('signed_at') or 'undated'} by {old['label']}; "
                           f"the newest, {item['referrer'][:19]} signed "
                           f"{item.get('signed_at') or 'undated'}, decides"))
            signer = trust.by_fingerprint(item["fingerprint"])
            if uri == PROMOTION_TYPE:
                checks += check_promotion(item["statement"], served.digest, require, signer,
                                          later_links(found, served.digest, trust))
                for link in require:
                    shown[link].append(CheckResult(name=f"required {link}",
                                                   status=Status.PASS, detail="promotion"))
            if uri == SLSA_PROVENANCE_TYPE:
                checks += check_slsa_provenance(item["statement"], served.digest,
                                                provenance_image, item["label"])
            if uri == TEST_RESULT_TYPE:
                honour = bool(signer and signer.acceptances)
                checks.append(check_test_result(item["statement"], honour_acceptances=honour,
                                                signer=item["label"]))
                for link in require:
                    result = link_shown_by_tests(item["statement"], link, honour_acceptances=honour)
                    shown[link].append(result)
                    checks.append(result)
        for link, results in shown.items():
            if not results:
                checks.append(CheckResult(
                    name=f"required {link}", status=Status.FAIL,
                    detail=f"--require-link {link}: no checked statement can show it (checked: "
                           f"{', '.join(_label(u) for u in wanted)}; test-result and "
                           "promotion can)"))
        attestations = [{"type": f["type"], "referrer": f["referrer"], "bundle": f["bundle"],
                         "signer": f["signer"], "fingerprint": f["fingerprint"],
                         "signed_at": f["signed_at"], "decides": f in used}
                        for f in found]
        return AttestVerifyReport(reference=str(reference), digest=str(served.digest),
                                  status=overall(checks), attestations=attestations,
                                  checks=checks)
    finally:
        if own:
            pool.close()
