"""The trust policy: which public keys' signed statements count here, and for what.

Where the keys come from (all may be combined):

- `--trust-key PUB` (repeatable): a PEM public key file, trusted for every predicate type,
  every promotion link and its acceptances; its name is the file's stem (`ci.pub` -> `ci`);
- `$IMAGEKIT_TRUST_KEYS`: such files, `os.pathsep`-separated;
- `--trust-policy FILE` (`$IMAGEKIT_TRUST_POLICY`), YAML or TOML, the shape of cosign's
  ClusterImagePolicy authorities / Conforma's policy sources, one entry per key:

      keys:
        - name: ci                     # how reasons name the signer ("signed by ci 3f2a…")
          key: ci.pub                  # a PEM file (relative to the policy file) ...
          # fingerprint: sha256:3f2a…  # ... or a key given by --trust-key/$IMAGEKIT_TRUST_KEYS
          types: [test-result, sbom]   # predicate types it vouches for (names, URIs, globs
                                       # such as cluster-*); default: all
          links: [base-identity, build, probes, hops]   # promotion links; default: all
          acceptances: true            # honour the profile acceptances it signed (default)

A key the policy names by fingerprint takes the policy's scope; a `--trust-key` the policy
does not name is trusted for everything (it was named on purpose). Bad input — a file that is
not a public key, a FIFO, a huge file, an unknown field, a fingerprint no given key has — is
one line, exit 2, before anything else is done.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from imagekit.errors import InvalidInput

if TYPE_CHECKING:  # cryptography is imported where a key is read (a promote trusting none
    # does not pay its ~30 ms)
    from cryptography.hazmat.primitives.asymmetric import ec

TRUST_KEYS_ENV = "IMAGEKIT_TRUST_KEYS"
TRUST_POLICY_ENV = "IMAGEKIT_TRUST_POLICY"
#: a PEM public key is a few hundred bytes; a policy a few KiB
MAX_KEY_BYTES = 64 * 1024
MAX_POLICY_BYTES = 1024 * 1024
#: a signer's name: a policy entry's `name`, and a key file's stem (`ci.pub` is `ci`)
SIGNER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_FINGERPRINT = re.compile(r"^(sha256:)?[0-9a-f]{64}$")

#: predicate type URIs -> the short names `--type`, policies and reasons use
KNOWN_TYPES = {
    "https://in-toto.io/attestation/test-result/v0.1": "test-result",
    "https://imagekit.dev/attestation/promotion/v0.1": "promotion",
    "https://cyclonedx.org/bom": "sbom",
}
_IMAGEKIT_TYPE = re.compile(r"^https://imagekit\.dev/attestation/([a-z0-9][a-z0-9-]*)/v[0-9.]+$")


def short_type(uri: str) -> str:
    """`test-result`, `promotion`, `sbom`, `cluster-probe` (any imagekit.dev/attestation/NAME
    type), else the URI itself."""
    if uri in KNOWN_TYPES:
        return KNOWN_TYPES[uri]
    found = _IMAGEKIT_TYPE.match(uri or "")
    return found.group(1) if found else uri


def signed_time(statement: dict) -> str | None:
    """The time the signer put INSIDE the signed statement (ISO 8601, UTC): the predicate's
    `timestamp` (test-result, cluster statements), `generated` (promotion) or CycloneDX's
    `metadata.timestamp`. None when it has none (such a statement is older than any dated
    one for freshness)."""
    predicate = statement.get("predicate") if isinstance(statement, dict) else None
    if not isinstance(predicate, dict):
        return None
    for value in (predicate.get("timestamp"), predicate.get("generated"),
                  (predicate.get("metadata") or {}).get("timestamp")
                  if isinstance(predicate.get("metadata"), dict) else None):
        if isinstance(value, str) and value:
            return _normal_time(value)
    return None


def _normal_time(value: str) -> str | None:
    import datetime as dt

    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.astimezone(dt.UTC).isoformat(timespec="microseconds")


def fingerprint_of(key: ec.EllipticCurvePublicKey) -> str:
    """`sha256:<hex>` of the key's SPKI DER (the same hash cosign's hint carries, base64)."""
    from cryptography.hazmat.primitives import serialization

    der = key.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return "sha256:" + hashlib.sha256(der).hexdigest()


def hint_of(fingerprint: str) -> str:
    """cosign's `verificationMaterial.publicKey.hint` for a fingerprint."""
    return base64.b64encode(bytes.fromhex(fingerprint.removeprefix("sha256:"))).decode()


def signer_label(name: str | None, fingerprint: str) -> str:
    """`ci 3f2a91c0…`: how every report, gate line and verification names a signer — the
    key's name (its file's stem, or the policy's name) and its fingerprint's first 8 hex.
    A key this machine does not know by name is `key 3f2a91c0…`."""
    return f"{name or 'key'} {fingerprint.removeprefix('sha256:')[:8]}…"


def fingerprint_of_hint(hint: str) -> str | None:
    """The fingerprint a cosign key hint (base64 of the sha256) stands for; None when the
    hint is not one."""
    try:
        raw = base64.b64decode(hint, validate=True)
    except ValueError:
        return None
    return "sha256:" + raw.hex() if len(raw) == 32 else None


def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    """A regular file's bytes, at most `limit`: never a FIFO, a device or an endless read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise InvalidInput(f"cannot read the {what}: {exc.strerror}", where=str(path)) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidInput(f"the {what} is not a regular file", where=str(path))
        if info.st_size > limit:
            raise InvalidInput(f"the {what} is larger than {limit} bytes", where=str(path))
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InvalidInput(f"the {what} is larger than {limit} bytes", where=str(path))
    return data


def load_trusted_public(path: Path) -> ec.EllipticCurvePublicKey:
    """A trust key file: an ECDSA PEM public key, nothing else (a private key is refused:
    a consumer must never be handed one)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    data = _read_bounded(path, MAX_KEY_BYTES, "trust key")
    if b"PRIVATE KEY" in data:
        raise InvalidInput("not a PEM public key: this is a PRIVATE key (trust the signer's .pub)",
                           where=str(path))
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise InvalidInput("not a PEM public key (a trust key is the signer's .pub)",
                           where=str(path)) from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise InvalidInput("a trust key must be an ECDSA public key", where=str(path))
    if not isinstance(key.curve, ec.SECP256R1):  # imagekit signs with P-256 only
        raise InvalidInput(f"a trust key must be ECDSA P-256, not {key.curve.name}",
                           where=str(path))
    return key


class TrustedKey(BaseModel):
    """One trusted signer: its name, fingerprint and scope."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    fingerprint: str
    source: str = Field(description="where the key came from: --trust-key, $IMAGEKIT_TRUST_KEYS "
                                    "or the policy file")
    types: list[str] = ["*"]
    links: list[str] = ["*"]
    acceptances: bool = True
    _public_key: Any = PrivateAttr(default=None)

    @property
    def public_key(self) -> ec.EllipticCurvePublicKey:
        return self._public_key

    @property
    def hint(self) -> str:
        return hint_of(self.fingerprint)

    @property
    def label(self) -> str:
        """`ci 3f2a91c0…`: how reasons name the signer (signer_label)."""
        return signer_label(self.name, self.fingerprint)

    def allows_type(self, predicate_type: str) -> bool:
        short = short_type(predicate_type)
        return any(fnmatch.fnmatchcase(short, p) or fnmatch.fnmatchcase(predicate_type, p)
                   for p in self.types)

    def allows_link(self, link: str) -> bool:
        return any(fnmatch.fnmatchcase(link, p) for p in self.links)


class PolicyEntry(BaseModel):
    """One entry of a policy file's `keys` list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    key: str | None = None
    fingerprint: str | None = None
    types: list[str] = ["*"]
    links: list[str] = ["*"]
    acceptances: bool = True

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SIGNER_NAME.match(value):
            raise ValueError("a key name is letters, digits, . _ - (at most 64)")
        return value

    @field_validator("fingerprint")
    @classmethod
    def _fingerprint(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().lower()
        if not _FINGERPRINT.match(value):
            raise ValueError("a fingerprint is sha256:<64 hex> (`imagekit evidence pull` and "
                             "`verify` print it)")
        return value if value.startswith("sha256:") else "sha256:" + value

    @field_validator("types", "links")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        if len(value) > 64 or any(not isinstance(v, str) or not v or len(v) > 200
                                  for v in value):
            raise ValueError("a list of at most 64 non-empty names or globs")
        return value


class PolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: list[PolicyEntry] = Field(min_length=1, max_length=256)


class TrustPolicy(BaseModel):
    """Every trusted key. Empty = nothing is trusted (the gate then decides from local
    evidence alone, as before)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: list[TrustedKey] = []

    def __bool__(self) -> bool:
        return bool(self.keys)

    def by_hint(self, hint: str | None) -> list[TrustedKey]:
        return [k for k in self.keys if hint and k.hint == hint]

    def by_fingerprint(self, fingerprint: str) -> TrustedKey | None:
        for key in self.keys:
            if key.fingerprint == fingerprint:
                return key
        return None

    def names(self) -> str:
        return ", ".join(k.label for k in self.keys) or "no key"


def _key(public: ec.EllipticCurvePublicKey, **fields: Any) -> TrustedKey:
    made = TrustedKey(fingerprint=fingerprint_of(public), **fields)
    made._public_key = public
    return made


def _stem_name(path: Path) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]", "-", path.stem)[:64].lstrip("._-")
    return name or "key"


def _parse_policy(path: Path) -> PolicyFile:
    data = _read_bounded(path, MAX_POLICY_BYTES, "trust policy")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise InvalidInput("the trust policy is not UTF-8 text", where=str(path)) from None
    try:
        if path.suffix == ".toml":
            import tomllib
            raw = tomllib.loads(text)
        else:
            import yaml
            raw = yaml.safe_load(text)
    except Exception as exc:  # noqa: BLE001 - yaml's and toml's errors: one line
        first = " ".join(str(exc).split())[:200]
        raise InvalidInput(f"the trust policy does not parse: {first}", where=str(path)) \
            from None
    if not isinstance(raw, dict):
        raise InvalidInput("the trust policy is a mapping with a `keys` list", where=str(path))
    try:
        return PolicyFile.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = ".".join(str(p) for p in error.get("loc", ()))
        raise InvalidInput(f"trust policy {loc}: {error.get('msg')}", where=str(path)) from None


def load_trust(trust_keys: Iterable[Path] = (), policy: Path | None = None, *,
               env: Mapping[str, str] | None = None) -> TrustPolicy:
    """The trust policy from `--trust-key` files, `$IMAGEKIT_TRUST_KEYS` and a policy file
    (`--trust-policy`, else `$IMAGEKIT_TRUST_POLICY`). Raises InvalidInput (exit 2).

    `env` holds those two variables as the CLI's settings read them (imagekit.cli.trustopts);
    nothing is read from the process's environment here."""
    env = {} if env is None else env
    given: list[tuple[Path, str]] = [(Path(p), "--trust-key") for p in trust_keys]
    for part in (env.get(TRUST_KEYS_ENV) or "").split(os.pathsep):
        if part.strip():
            given.append((Path(part.strip()), f"${TRUST_KEYS_ENV}"))
    if policy is None and env.get(TRUST_POLICY_ENV):
        policy = Path(env[TRUST_POLICY_ENV])
    loose: dict[str, tuple[ec.EllipticCurvePublicKey, Path, str]] = {}
    for path, source in given:
        public = load_trusted_public(path)
        loose.setdefault(fingerprint_of(public), (public, path, source))
    keys: list[TrustedKey] = []
    if policy is not None:
        parsed = _parse_policy(Path(policy))
        for index, entry in enumerate(parsed.keys):
            where = f"{policy} keys[{index}]"
            if (entry.key is None) == (entry.fingerprint is None):
                raise InvalidInput(f"trust policy key {entry.name!r} names exactly one of "
                                   "`key` (a file) or `fingerprint`", where=where)
            if entry.key is not None:
                key_path = Path(entry.key)
                if not key_path.is_absolute():
                    key_path = Path(policy).parent / key_path
                public = load_trusted_public(key_path)
            elif entry.fingerprint is not None:  # always, by the exactly-one check above
                if entry.fingerprint not in loose:
                    raise InvalidInput(f"trust policy key {entry.name!r} is named by "
                                       f"fingerprint {entry.fingerprint[:19]}…, but no "
                                       f"--trust-key or ${TRUST_KEYS_ENV} file has that key",
                                       where=where)
                public = loose[entry.fingerprint][0]
            made = _key(public, name=entry.name, source=f"policy {policy}", types=entry.types,
                        links=entry.links, acceptances=entry.acceptances)
            if any(k.fingerprint == made.fingerprint for k in keys):
                raise InvalidInput(f"trust policy names key {made.label} twice", where=where)
            if any(k.name == made.name for k in keys):
                raise InvalidInput(f"trust policy names {made.name!r} twice", where=where)
            keys.append(made)
    for fingerprint, (public, path, source) in loose.items():
        if any(k.fingerprint == fingerprint for k in keys):
            continue  # the policy's entry for it decides its scope
        name = _stem_name(path)
        if any(k.name == name for k in keys):
            name = f"{name}-{fingerprint.removeprefix('sha256:')[:8]}"
        keys.append(_key(public, name=name, source=f"{source} {path}"))
    return TrustPolicy(keys=keys)


def single_key(path: Path, name: str | None = None) -> TrustPolicy:
    """One key file, trusted for everything (named by the file's stem, as a --trust-key is)."""
    public = load_trusted_public(Path(path))
    return TrustPolicy(keys=[_key(public, name=name or _stem_name(Path(path)),
                                  source=f"--key {path}")])
