"""Registry credentials: made once at random, kept only in files of mode 0600.

- `secrets/credentials.json`: the clear passwords (production basic auth, target token users).
- `secrets/production.htpasswd`: bcrypt hashes the production registry checks.
- `secrets/token-users.json`: bcrypt hashes + allowed actions the token service checks.
- `docker-config/config.json`: docker-style `auths` for production and target, which every
  client (docker, python-on-whales, imagekit.registry) reads through DOCKER_CONFIG.

Nothing here ever reaches argv, a log or the JSON output of a command.

bcrypt cost is kept low (6) on purpose: the passwords are 32 random bytes, so the cost adds no
safety, while distribution re-checks the hash on every basic-auth request.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from imagekit.errors import InvalidInput
from imagekit.infra.state import StatePaths

BCRYPT_ROUNDS = 6
#: Directories that hold nothing but secrets: closed to everyone but root.
_PRIVATE_DIRS = {"secrets", "docker-config"}
USERNAME = "imagekit"
READER = "imagekit-reader"


class Login(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    username: str
    password: str


class Credentials(BaseModel):
    """The clear credentials (file mode 0600). `target_reader` may only pull."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    production: Login
    target: Login
    target_reader: Login
    http_secret: str


def write_private(path: Path, data: bytes) -> bool:
    """Write `data` with mode 0600 (created so, never briefly readable); False if unchanged."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent.name in _PRIVATE_DIRS:
        os.chmod(path.parent, 0o700)
    try:
        if path.read_bytes() == data:
            os.chmod(path, 0o600)
            return False
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(tmp, path)
    return True


def _new_password() -> str:
    return secrets.token_urlsafe(32)


def ensure_credentials(paths: StatePaths) -> Credentials:
    """Load the stored credentials, or make them on first use."""
    try:
        return Credentials.model_validate_json(paths.credentials.read_text())
    except (FileNotFoundError, ValueError):
        pass
    creds = Credentials(production=Login(username=USERNAME, password=_new_password()),
                        target=Login(username=USERNAME, password=_new_password()),
                        target_reader=Login(username=READER, password=_new_password()),
                        http_secret=secrets.token_hex(32))
    write_private(paths.credentials, creds.model_dump_json(indent=2).encode())
    return creds


def load_credentials(paths: StatePaths | None = None) -> Credentials:
    """For tests and tools that need a second identity (e.g. the pull-only target reader)."""
    paths = paths or StatePaths()
    return Credentials.model_validate_json(paths.credentials.read_text())


def _missing_extra(module: str) -> InvalidInput:
    """Only the local registries and their token service need bcrypt and pyjwt (the `infra`
    extra), so a plain `pip install imagekit` leaves them out: asking for the local
    infrastructure without them is one line naming the install, exit 2."""
    return InvalidInput(f"the local infrastructure needs {module}: "
                        "pip install 'imagekit[infra]'")


def bcrypt_module() -> Any:
    """bcrypt, from the `infra` extra."""
    try:
        import bcrypt
    except ImportError:
        raise _missing_extra("bcrypt") from None
    return bcrypt


def jwt_module() -> Any:
    """pyjwt, from the `infra` extra."""
    try:
        import jwt
    except ImportError:
        raise _missing_extra("pyjwt") from None
    return jwt


def _hash_matches(password: str, hashed: str) -> bool:
    bcrypt = bcrypt_module()
    try:
        return bcrypt.checkpw(password.encode(), hashed.encode())
    except ValueError:
        return False


def _bcrypt(password: str) -> str:
    bcrypt = bcrypt_module()
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(BCRYPT_ROUNDS)).decode()


def htpasswd_path(paths: StatePaths) -> Path:
    return paths.secrets / "production.htpasswd"


def token_users_path(paths: StatePaths) -> Path:
    return paths.secrets / "token-users.json"


def ensure_htpasswd(paths: StatePaths, creds: Credentials) -> Path:
    """htpasswd (bcrypt) for the production registry; rewritten only if it no longer matches."""
    path = htpasswd_path(paths)
    try:
        user, hashed = path.read_text().strip().split(":", 1)
        if user == creds.production.username and _hash_matches(creds.production.password, hashed):
            return path
    except (FileNotFoundError, ValueError):
        pass
    write_private(path, f"{creds.production.username}:{_bcrypt(creds.production.password)}\n"
                  .encode())
    return path


def ensure_token_users(paths: StatePaths, creds: Credentials) -> Path:
    """The token service's user file: bcrypt hash and the actions each user may be granted."""
    path = token_users_path(paths)
    wanted = {creds.target.username: (creds.target.password, ["pull", "push", "delete"]),
              creds.target_reader.username: (creds.target_reader.password, ["pull"])}
    try:
        current = json.loads(path.read_text())
        if (set(current) == set(wanted)
                and all(_hash_matches(wanted[u][0], current[u]["bcrypt"])
                        and current[u]["actions"] == wanted[u][1] for u in wanted)):
            return path
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        pass
    data = {user: {"bcrypt": _bcrypt(pw), "actions": actions}
            for user, (pw, actions) in wanted.items()}
    write_private(path, json.dumps(data, indent=2).encode())
    return path


def _auth(login: Login) -> str:
    return base64.b64encode(f"{login.username}:{login.password}".encode()).decode()


def ensure_docker_config(paths: StatePaths, creds: Credentials, addresses: dict[str, str]) -> Path:
    """config.json with `auths` for production and target; other keys in it are kept."""
    path = paths.docker_config_dir / "config.json"
    try:
        config = json.loads(path.read_text())
        if not isinstance(config, dict):
            config = {}
    except (FileNotFoundError, ValueError):
        config = {}
    auths = config.setdefault("auths", {})
    auths[addresses["production"]] = {"auth": _auth(creds.production)}
    auths[addresses["target"]] = {"auth": _auth(creds.target)}
    write_private(path, (json.dumps(config, indent=2, sort_keys=True) + "\n").encode())
    return paths.docker_config_dir
