"""Whose signed statements a consumer honours: trusted public keys, each with a name and the
predicate types, promotion links and acceptances it may vouch for (imagekit.trust.policy)."""

from imagekit.trust.policy import (
    TRUST_KEYS_ENV,
    TRUST_POLICY_ENV,
    TrustedKey,
    TrustPolicy,
    fingerprint_of,
    load_trust,
    short_type,
    signed_time,
)

__all__ = ["TRUST_KEYS_ENV", "TRUST_POLICY_ENV", "TrustPolicy", "TrustedKey", "fingerprint_of",
           "load_trust", "short_type", "signed_time"]
