"""The trust options every evidence-reading command takes (`--trust-key`, `--trust-policy`,
`$IMAGEKIT_TRUST_KEYS`, `$IMAGEKIT_TRUST_POLICY`; imagekit.trust.policy), and the registry
reader the gate, the report and the NAME resolver are handed (imagekit.attest.pull)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagekit.cli.surface import option

if TYPE_CHECKING:
    from imagekit.oci import ImageReference
    from imagekit.trust import TrustPolicy

TrustKeyOpt = option("--trust-key", dir_okay=False,
                     note="Here they count where the local evidence has none.")
TrustPolicyOpt = option("--trust-policy", dir_okay=False)


def load(trust_key: list[Path] | None, trust_policy: Path | None) -> TrustPolicy:
    """The trust policy (empty when nothing is trusted). Bad input: one line, exit 2."""
    from imagekit.cli.app import settings
    from imagekit.trust import load_trust
    from imagekit.trust.policy import TRUST_KEYS_ENV, TRUST_POLICY_ENV

    given = settings()
    env = {name: str(value) for name, value in ((TRUST_KEYS_ENV, given.trust_keys),
                                                (TRUST_POLICY_ENV, given.trust_policy))
           if value is not None}
    return load_trust(list(trust_key or []), trust_policy, env=env)


def flagged_options(insecure: Sequence[str] = (), ca_file: Path | None = None) -> Any:
    """RegistryOptions from the settings with the command's --insecure and --ca-file (the CA
    file checked as PEM first: one line, not OpenSSL's error)."""
    from imagekit.cli.app import settings
    from imagekit.registry import RegistryOptions

    if ca_file is not None:
        from imagekit.inputs import pem_ca_file

        pem_ca_file(ca_file)
    return RegistryOptions.from_settings(settings(), insecure=frozenset(insecure),
                                         ca_file=ca_file)


def registry_options(registry: str, insecure: Sequence[str] = (),
                     ca_file: Path | None = None) -> Any:
    """RegistryOptions for reading one registry: the command's --insecure/--ca-file, and for
    infra's loopback registries infra's CA and docker config."""
    from imagekit.cli.app import settings
    from imagekit.report.resolve import _registry_options

    return _registry_options(registry, flagged_options(insecure, ca_file),
                             settings().state_dir)


def puller(trust: TrustPolicy, reference: ImageReference | None, pool: Any) -> Any:
    """pull(store, digest, trust) reading `reference`'s endpoint; None without trust or an
    endpoint (a bare DIGEST: only what is already in the store counts)."""
    if not trust or reference is None:
        return None
    from imagekit.attest.pull import puller as make

    return make(pool, reference)


def name_resolver(trust: TrustPolicy | None, store: Any, pool: Any = None,
                  insecure: Sequence[str] = (), ca_file: Path | None = None) -> Any:
    """For `imagekit.names.resolve_target(remote=…)`: a spec NAME with no build in this store
    resolves to the profile's staging tag at the registry, verified by a test-result statement
    a trusted key signed about the digest it serves (pulled into the store). None without
    trust. Without `pool`, the registry is read with the command's --insecure/--ca-file."""
    if not trust:
        return None

    def resolve(reference: ImageReference) -> tuple[Any, str]:
        from imagekit.attest.pull import pull_attestations
        from imagekit.errors import InvalidInput
        from imagekit.names import digest_of
        from imagekit.registry import ClientPool
        from imagekit.report.trusted import TEST_RESULT_TYPE, signed_statements

        own = pool is None
        readers = pool or ClientPool(registry_options(reference.registry, insecure, ca_file))
        try:
            client = readers.get(reference.registry)
            digest = digest_of(client, reference)
            outcome = pull_attestations(client, reference.repository, digest, trust, store)
        finally:
            if own:
                readers.close()
        newest = next(iter(signed_statements(store, digest, trust)[0].get(TEST_RESULT_TYPE)
                           or []), None)
        if newest is None:
            problems = "; ".join(f"{c.name}: {c.detail}" for c in outcome.problems)[:300]
            raise InvalidInput(f"{reference} serves {digest}, but no test-result statement "
                               f"signed by a trusted key ({trust.names()}) is about it"
                               + (f" ({problems})" if problems else ""), where=str(reference))
        return digest, f"{reference} -> {digest}, verified by the test-result {newest.source}"

    return resolve
