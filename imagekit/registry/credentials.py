"""Credentials from docker's own config.json, the way docker finds them.

The record: "credentials were provided through existing credential files, not placed in public
commands". So imagekit never takes a password on its command line. It reads, in docker's order:

1. ``credHelpers[<registry>]`` -> ``docker-credential-<helper> get`` (server on stdin, JSON on
   stdout; never argv),
2. ``auths[<registry>]`` (``auth`` = base64 user:password, or ``username``/``password``, or
   ``identitytoken``),
3. ``credsStore`` -> ``docker-credential-<store> get``.

The config lives in ``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``. A
`Credential` never prints its secret (repr and str hide it), and `sources` lists where we looked,
so an Unauthorized error can say so without saying what was found.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from imagekit.errors import InvalidInput

HELPER_TIMEOUT_S = 30


@dataclass(frozen=True)
class Credential:
    """A username with a password, or an identity (refresh) token. The secret never prints."""

    username: str
    secret: str = field(repr=False)
    source: str = ""
    identity_token: bool = False

    def __str__(self) -> str:
        kind = "identity token" if self.identity_token else f"user {self.username!r}"
        return f"{kind} from {self.source}"


@dataclass
class Lookup:
    credential: Credential | None
    sources: list[str]


def docker_config_dir(override: Path | None = None) -> Path:
    if override is not None:
        return Path(override)
    if os.environ.get("DOCKER_CONFIG"):
        return Path(os.environ["DOCKER_CONFIG"])
    return Path.home() / ".docker"


def _registry_keys(registry: str) -> list[str]:
    """The spellings docker uses as keys for one registry in `auths`."""
    keys = [registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/",
            f"https://{registry}/v2/", f"http://{registry}/v2/"]
    if registry == "docker.io":
        keys += ["https://index.docker.io/v1/", "index.docker.io", "registry-1.docker.io"]
    return keys


class CredentialSource:
    """Reads one docker config directory; `lookup(registry)` never raises for a missing file."""

    def __init__(self, config_dir: Path | None = None) -> None:
        self.config_dir = docker_config_dir(config_dir)
        self.config_file = self.config_dir / "config.json"

    def _load(self) -> dict:
        if not self.config_file.is_file():
            return {}
        try:
            data = json.loads(self.config_file.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise InvalidInput(f"docker config cannot be read: {type(exc).__name__}",
                               where=str(self.config_file)) from None
        return data if isinstance(data, dict) else {}

    def lookup(self, registry: str) -> Lookup:
        config = self._load()
        sources: list[str] = []
        if not config:
            sources.append(f"{self.config_file} (absent)")
            return Lookup(None, sources)
        helpers = config.get("credHelpers") or {}
        for key in _registry_keys(registry):
            if key in helpers:
                name = f"credHelpers[{registry}] docker-credential-{helpers[key]}"
                sources.append(name)
                found = run_helper(helpers[key], key, name)
                if found is not None:
                    return Lookup(found, sources)
                break
        auths = config.get("auths") or {}
        sources.append(f"{self.config_file} auths[{registry}]")
        for key in _registry_keys(registry):
            entry = auths.get(key)
            if isinstance(entry, dict):
                found = _from_auth_entry(entry, f"{self.config_file} auths[{key}]")
                if found is not None:
                    return Lookup(found, sources)
        store = config.get("credsStore")
        if store:
            name = f"credsStore docker-credential-{store}"
            sources.append(name)
            for key in (registry, f"https://{registry}"):
                found = run_helper(store, key, name)
                if found is not None:
                    return Lookup(found, sources)
        return Lookup(None, sources)


def _from_auth_entry(entry: dict, source: str) -> Credential | None:
    if entry.get("identitytoken"):
        return Credential(entry.get("username") or "<token>", entry["identitytoken"], source,
                          identity_token=True)
    if entry.get("auth"):
        try:
            decoded = base64.b64decode(entry["auth"], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise InvalidInput("an 'auth' entry is not base64 of user:password",
                               where=source) from None
        user, sep, password = decoded.partition(":")
        if not sep:
            raise InvalidInput("an 'auth' entry is not base64 of user:password", where=source)
        return Credential(user, password, source)
    if entry.get("username") and entry.get("password") is not None:
        return Credential(entry["username"], entry["password"], source)
    return None


def run_helper(helper: str, server: str, source: str) -> Credential | None:
    """`docker-credential-<helper> get`: the server URL on stdin, the secret on stdout."""
    program = shutil.which(f"docker-credential-{helper}")
    if program is None:
        return None
    try:
        done = subprocess.run([program, "get"], input=server.encode(), capture_output=True,
                              timeout=HELPER_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None  # "credentials not found" and friends: try the next source
    try:
        body = json.loads(done.stdout)
    except json.JSONDecodeError:
        return None
    user, secret = body.get("Username") or "", body.get("Secret") or ""
    if not secret:
        return None
    if user == "<token>":
        return Credential(user, secret, source, identity_token=True)
    return Credential(user, secret, source)
