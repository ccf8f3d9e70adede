"""The project signing key: ECDSA P-256, PKCS#8 PEM private key (0600) + SPKI PEM public key.

Why this format: cosign verifies with `--key cosign.pub`-style PEM public keys of any origin,
so a consumer needs nothing from imagekit to check what imagekit signed; the private key is a
plain PEM that `cryptography` loads without a password prompt. It is read from a file only —
never from argv, the environment, logs or evidence.
"""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from imagekit.errors import InvalidInput

KEY_DIR_ENV = "IMAGEKIT_KEY_DIR"
KEY_ENV = "IMAGEKIT_SIGNING_KEY"
PRIVATE_NAME = "imagekit.key"
PUBLIC_NAME = "imagekit.pub"


def default_key_dir() -> Path:
    return Path(os.environ.get(KEY_DIR_ENV) or Path.home() / ".config" / "imagekit" / "keys")


def default_private_key() -> Path:
    return Path(os.environ.get(KEY_ENV) or default_key_dir() / PRIVATE_NAME)


def generate(directory: Path, *, overwrite: bool = False) -> tuple[Path, Path]:
    """Write `imagekit.key` (0600, created with that mode: never world-readable for an
    instant) and `imagekit.pub` into `directory`. Refuses to replace an existing key."""
    directory.mkdir(parents=True, exist_ok=True)
    private_path, public_path = directory / PRIVATE_NAME, directory / PUBLIC_NAME
    if private_path.exists() and not overwrite:
        raise InvalidInput("a signing key exists already (use --force to replace it)",
                           where=str(private_path))
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    if private_path.exists():
        private_path.unlink()
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
    os.chmod(private_path, 0o600)
    public_path.write_bytes(public_pem(key.public_key()))
    return private_path, public_path


def public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def load_private(path: Path) -> ec.EllipticCurvePrivateKey:
    try:
        mode = path.stat().st_mode & 0o077
        data = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"cannot read the signing key: {exc.strerror}", where=str(path)) \
            from None
    if mode:
        raise InvalidInput("the signing key is readable by others (chmod 600 it)",
                           where=str(path))
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise InvalidInput("not an unencrypted PEM private key", where=str(path)) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise InvalidInput("the signing key must be ECDSA P-256", where=str(path))
    return key


def load_public(path: Path) -> ec.EllipticCurvePublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise InvalidInput(f"cannot read the public key: {exc.strerror}", where=str(path)) \
            from None
    except ValueError:
        raise InvalidInput("not a PEM public key", where=str(path)) from None
    if not isinstance(key, ec.EllipticCurvePublicKey):
        raise InvalidInput("the public key must be ECDSA", where=str(path))
    return key


def key_hint(key: ec.EllipticCurvePublicKey) -> str:
    """What cosign writes as `verificationMaterial.publicKey.hint`: base64(sha256(SPKI DER))."""
    der = key.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()
