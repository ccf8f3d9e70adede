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


def default_key_dir(chosen: Path | None = None) -> Path:
    """`chosen` (`$IMAGEKIT_KEY_DIR`, from the CLI's settings), else ~/.config/imagekit/keys."""
    return Path(chosen or Path.home() / ".config" / "imagekit" / "keys")


def default_private_key(chosen: Path | None = None, key_dir: Path | None = None) -> Path:
    """`chosen` (`$IMAGEKIT_SIGNING_KEY`), else imagekit.key in the key directory."""
    return Path(chosen or default_key_dir(key_dir) / PRIVATE_NAME)


def key_file_names(name: str | None = None) -> tuple[str, str]:
    """(NAME.key, NAME.pub); None: imagekit.key and imagekit.pub, the pair `attest` and
    `promote` find in the key directory without --key. NAME is what reports call the signer
    (`ci.pub` is `ci`), so it follows the trust policy's rule for a signer's name."""
    if name is None:
        return PRIVATE_NAME, PUBLIC_NAME
    from imagekit.trust.policy import SIGNER_NAME

    if not SIGNER_NAME.match(name):
        raise InvalidInput("--name is letters, digits, . _ - (at most 64, starting with a "
                           "letter or digit): it names the signer in reports", where=repr(name))
    return f"{name}.key", f"{name}.pub"


def check_key_dir(directory: Path, *, overwrite: bool = False,
                  name: str | None = None) -> tuple[Path, Path]:
    """Where `generate` would write, checked before a key is made: the folder not writable by
    others (a 0777 folder lets anyone swap the public key), neither file there already (nor
    a symlink in its place) unless `overwrite`."""
    import stat

    private_name, public_name = key_file_names(name)
    private_path, public_path = directory / private_name, directory / public_name
    if directory.exists() or directory.is_symlink():
        try:
            info = directory.stat()
        except OSError as exc:
            raise InvalidInput(f"--out cannot be used: {exc.strerror}",
                               where=str(directory.absolute())) from None
        if not stat.S_ISDIR(info.st_mode):
            raise InvalidInput("the key folder (--out) is not a directory",
                               where=str(directory.absolute()))
        if info.st_mode & 0o002:
            raise InvalidInput("the key folder is writable by others (chmod o-w it, or choose "
                               "a private folder with --out)", where=str(directory.absolute()))
    for path in (private_path, public_path):
        if os.path.lexists(path) and not overwrite:
            what = "a symlink" if path.is_symlink() else "a key file"
            raise InvalidInput(f"{what} exists already (use --overwrite to replace it)",
                               where=str(path))
        if os.path.lexists(path) and (path.is_dir() and not path.is_symlink()):
            raise InvalidInput("a directory is in the key file's place", where=str(path))
    return private_path, public_path


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create `path` (never through a symlink, never over an existing file) with `mode`."""
    if os.path.lexists(path):
        path.unlink()  # --overwrite: the link itself, never what it points at
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(path, mode)


def generate(directory: Path, *, overwrite: bool = False,
             name: str | None = None) -> tuple[Path, Path]:
    """Write `NAME.key` (0600, created with that mode: never world-readable for an instant)
    and `NAME.pub` into `directory` (no name: imagekit.key and imagekit.pub). Refuses to
    replace either file (or to write through a symlink) without `overwrite`, and a folder
    others may write into."""
    private_path, public_path = check_key_dir(directory, overwrite=overwrite, name=name)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_key_dir(directory, overwrite=overwrite, name=name)
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    _write_new(private_path, pem, 0o600)
    _write_new(public_path, public_pem(key.public_key()), 0o644)
    return private_path, public_path


def public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM,
                            serialization.PublicFormat.SubjectPublicKeyInfo)


#: A PEM key file is well under 1 KiB; anything past 64 KiB is not one.
MAX_KEY_BYTES = 64 * 1024


def load_private(path: Path) -> ec.EllipticCurvePrivateKey:
    """The signing key: a regular file (no FIFO, no device), not readable by others, at most
    64 KiB, an unencrypted PEM ECDSA P-256 private key. Called before any side effect."""
    from imagekit.inputs import read_bytes

    path = Path(path)
    data = read_bytes(path, "the signing key", max_bytes=MAX_KEY_BYTES)
    try:
        mode = path.stat().st_mode & 0o077
    except OSError as exc:
        raise InvalidInput(f"cannot read the signing key: {exc.strerror}", where=str(path)) \
            from None
    if mode:
        raise InvalidInput("the signing key is readable by others (chmod 600 it)",
                           where=str(path))
    if b"PRIVATE KEY-----" not in data:
        kind = "a public key" if b"PUBLIC KEY-----" in data else "not a PEM private key"
        raise InvalidInput(f"the signing key is {kind}: an ECDSA P-256 private key (PEM) is "
                           "needed", where=str(path))
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise InvalidInput("not an unencrypted PEM private key", where=str(path)) from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        raise InvalidInput("the signing key must be ECDSA P-256", where=str(path))
    return key


def load_public(path: Path) -> ec.EllipticCurvePublicKey:
    """The verification key: a regular file of at most 64 KiB, a PEM ECDSA P-256 public key
    (another curve is bad input, exit 2 — not a failed signature)."""
    from imagekit.inputs import read_bytes

    path = Path(path)
    data = read_bytes(path, "the public key", max_bytes=MAX_KEY_BYTES)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError):
        raise InvalidInput("not a PEM public key", where=str(path)) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise InvalidInput("the public key must be ECDSA P-256", where=str(path))
    return key


def fingerprint(public_path: Path) -> str:
    """`sha256:<hex>` of the public key file's key: what a trust policy's `fingerprint` names
    (imagekit.trust.fingerprint_of)."""
    from imagekit.trust.policy import fingerprint_of

    return fingerprint_of(load_public(public_path))


def key_hint(key: ec.EllipticCurvePublicKey) -> str:
    """What cosign writes as `verificationMaterial.publicKey.hint`: base64(sha256(SPKI DER))."""
    der = key.public_bytes(serialization.Encoding.DER,
                           serialization.PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()
