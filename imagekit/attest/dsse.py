"""DSSE envelopes (in-toto's signing wrapper) and the Sigstore bundle v0.3 that carries one.

The bundle is the layout cosign 3 itself writes for `cosign attest` and reads back with
`cosign verify-attestation --key`: `dsseEnvelope` plus `verificationMaterial.publicKey.hint`,
no transparency-log entry (offline, hence `--insecure-ignore-tlog` on the cosign side).
"""

from __future__ import annotations

import base64
import json

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from imagekit.attest.keys import key_hint

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE pre-authentication encoding: what is actually signed."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def sign_envelope(statement: dict, key: ec.EllipticCurvePrivateKey) -> dict:
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    signature = key.sign(pae(INTOTO_PAYLOAD_TYPE, payload), ec.ECDSA(hashes.SHA256()))
    return {"payload": base64.b64encode(payload).decode(), "payloadType": INTOTO_PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(signature).decode()}]}


def bundle_of(envelope: dict, key: ec.EllipticCurvePrivateKey) -> bytes:
    bundle = {"mediaType": BUNDLE_MEDIA_TYPE,
              "verificationMaterial": {"publicKey": {"hint": key_hint(key.public_key())}},
              "dsseEnvelope": envelope}
    return json.dumps(bundle, separators=(",", ":")).encode()


class EnvelopeError(ValueError):
    """The envelope does not parse or no signature verifies: the one-line reason."""


def envelope_of_bundle(data: bytes) -> dict:
    try:
        bundle = json.loads(data)
        envelope = bundle["dsseEnvelope"]
        if not isinstance(envelope, dict):
            raise TypeError
        return envelope
    except (ValueError, KeyError, TypeError):
        raise EnvelopeError("not a Sigstore bundle with a DSSE envelope") from None


def verify_envelope(envelope: dict, key: ec.EllipticCurvePublicKey) -> dict:
    """The statement inside `envelope` when one of its signatures verifies with `key`."""
    try:
        payload_type = envelope["payloadType"]
        payload = base64.b64decode(envelope["payload"], validate=True)
        signatures = [base64.b64decode(s["sig"], validate=True)
                      for s in envelope["signatures"]]
    except (KeyError, TypeError, ValueError):
        raise EnvelopeError("malformed DSSE envelope") from None
    if payload_type != INTOTO_PAYLOAD_TYPE:
        raise EnvelopeError(f"payload type {payload_type!r} is not in-toto")
    signed = pae(payload_type, payload)
    for signature in signatures:
        try:
            key.verify(signature, signed, ec.ECDSA(hashes.SHA256()))
            break
        except InvalidSignature:
            continue
    else:
        raise EnvelopeError("no signature verifies with the public key")
    try:
        statement = json.loads(payload)
    except ValueError:
        raise EnvelopeError("signed payload is not JSON") from None
    if not isinstance(statement, dict):
        raise EnvelopeError("signed payload is not an in-toto statement")
    return statement
