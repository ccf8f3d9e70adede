"""A small Bearer-token service for the `target` registry: the challenge flow of Docker Hub/Harbor.

1. A client asks the registry, gets `401` with
   `WWW-Authenticate: Bearer realm="https://127.0.0.1:5010/token",service="…",scope="…"`.
2. It asks the realm: `GET /token?service=…&scope=repository:NAME:pull,push` with HTTP Basic
   credentials (or `POST /token` with an OAuth2 `grant_type=password` form).
3. We check the credentials against our own user file (bcrypt), grant the requested actions the
   user may have, and answer `{"token": JWT, "access_token": JWT, "expires_in": …}`.
4. The JWT (ES256) carries the signing certificate in its `x5c` header; the registry trusts it
   because that certificate is its `auth.token.rootcertbundle` (distribution 2.8 token auth).

Run as `python -m imagekit.infra.token_service --config FILE`; FILE (JSON) names the key files,
the user file and the listen address. Secrets are read from files, never from argv, and neither
passwords nor tokens are logged.
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import secrets
import ssl
import sys
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from pydantic import BaseModel, ConfigDict

from imagekit.infra.credentials import bcrypt_module, jwt_module

ALL_REPOSITORY_ACTIONS = ("pull", "push", "delete")


class TokenServiceConfig(BaseModel):
    """Everything the service needs, by path (the file itself holds no secret)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = "127.0.0.1"
    port: int = 5010
    tls_cert: Path | None = None
    tls_key: Path | None = None
    signing_key: Path
    signing_cert: Path
    users_file: Path
    issuer: str
    service: str
    ttl_seconds: int = 900


def parse_scope(scope: str) -> tuple[str, str, list[str]] | None:
    """`type:name:actions` → parts; the name may itself hold ':' (e.g. host:port/repo)."""
    head, sep, actions = scope.rpartition(":")
    if not sep:
        return None
    kind, sep, name = head.partition(":")
    if not sep or not kind or not name:
        return None
    return kind, name, [a for a in actions.split(",") if a]


def grant(scopes: list[str], allowed: list[str]) -> list[dict[str, Any]]:
    """The `access` claim: for each requested scope, the requested actions the user may have."""
    access: dict[tuple[str, str], list[str]] = {}
    full = all(a in allowed for a in ALL_REPOSITORY_ACTIONS)
    for scope in scopes:
        for raw in scope.split(" "):
            parsed = parse_scope(raw)
            if parsed is None:
                continue
            kind, name, actions = parsed
            if kind == "repository":
                granted = [a for a in actions if a in allowed or (a == "*" and full)]
            elif kind == "registry" and name == "catalog":
                granted = ["*"] if full and "*" in actions else []
            else:
                granted = []
            bucket = access.setdefault((kind, name), [])
            bucket.extend(a for a in granted if a not in bucket)
    return [{"type": k, "name": n, "actions": a} for (k, n), a in access.items()]


class TokenIssuer:
    """Checks credentials and signs tokens; pure enough to be tested without a socket."""

    def __init__(self, config: TokenServiceConfig) -> None:
        self.config = config
        self._key: Any = serialization.load_pem_private_key(config.signing_key.read_bytes(),
                                                       password=None)
        cert = x509.load_pem_x509_certificate(config.signing_cert.read_bytes())
        self._x5c = [base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()]
        self._users_mtime = 0.0
        self._users: dict[str, dict[str, Any]] = {}

    def _load_users(self) -> dict[str, dict[str, Any]]:
        mtime = self.config.users_file.stat().st_mtime
        if mtime != self._users_mtime:
            self._users = json.loads(self.config.users_file.read_text())
            self._users_mtime = mtime
        return self._users

    def authenticate(self, username: str, password: str) -> list[str] | None:
        """The actions the user may be granted, or None for bad credentials."""
        entry = self._load_users().get(username)
        if not entry:
            return None
        try:
            ok = bcrypt_module().checkpw(password.encode(), entry["bcrypt"].encode())
        except ValueError:
            ok = False
        return list(entry.get("actions", [])) if ok else None

    def issue(self, username: str, allowed: list[str], scopes: list[str]) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": self.config.issuer,
            "sub": username,
            "aud": self.config.service,
            "exp": now + self.config.ttl_seconds,
            "nbf": now - 10,
            "iat": now,
            "jti": secrets.token_hex(16),
            "access": grant(scopes, allowed),
        }
        token = jwt_module().encode(claims, self._key, algorithm="ES256",
                                    headers={"x5c": self._x5c})
        return {"token": token, "access_token": token, "expires_in": self.config.ttl_seconds,
                "issued_at": dt.datetime.fromtimestamp(now, dt.UTC)
                .isoformat().replace("+00:00", "Z")}


class _Handler(BaseHTTPRequestHandler):
    server_version = "imagekit-token/1"
    issuer: TokenIssuer  # set on the class by serve()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        # The default logs the request line only; query strings carry scopes, never secrets.
        sys.stdout.write(f"{self.log_date_time_string()} {self.address_string()} "
                         f"{format % args}\n")
        sys.stdout.flush()

    def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
              ) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _unauthorized(self, why: str) -> None:
        self._json(HTTPStatus.UNAUTHORIZED,
                   {"errors": [{"code": "UNAUTHORIZED", "message": why}]},
                   {"WWW-Authenticate": 'Basic realm="imagekit-token"'})

    def _basic(self) -> tuple[str, str] | None:
        header = self.headers.get("Authorization", "")
        if not header.lower().startswith("basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return user, password

    def _answer(self, params: dict[str, list[str]], login: tuple[str, str] | None) -> None:
        service = params.get("service", [self.issuer.config.service])[0]
        if service != self.issuer.config.service:
            self._json(HTTPStatus.BAD_REQUEST,
                       {"errors": [{"code": "DENIED", "message": f"unknown service {service!r}"}]})
            return
        if login is None:
            self._unauthorized("credentials required")
            return
        allowed = self.issuer.authenticate(*login)
        if allowed is None:
            self._unauthorized("bad credentials")
            return
        body = self.issuer.issue(login[0], allowed, params.get("scope", []))
        sys.stdout.write(f"issued token sub={login[0]} scopes={params.get('scope', [])}\n")
        self._json(HTTPStatus.OK, body)

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._json(HTTPStatus.OK, {"ok": True})
            return
        if url.path != "/token":
            self._json(HTTPStatus.NOT_FOUND, {"errors": [{"code": "NOT_FOUND"}]})
            return
        self._answer(parse_qs(url.query), self._basic())

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        url = urlsplit(self.path)
        if url.path != "/token":
            self._json(HTTPStatus.NOT_FOUND, {"errors": [{"code": "NOT_FOUND"}]})
            return
        length = int(self.headers.get("Content-Length") or 0)
        form = parse_qs(self.rfile.read(length).decode(errors="replace"))
        login = self._basic()
        if form.get("grant_type", [""])[0] == "password":
            login = (form.get("username", [""])[0], form.get("password", [""])[0])
        self._answer(form, login)


def serve(config: TokenServiceConfig) -> None:
    handler = type("Handler", (_Handler,), {"issuer": TokenIssuer(config)})
    server = ThreadingHTTPServer((config.host, config.port), handler)
    server.daemon_threads = True
    if config.tls_cert and config.tls_key:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(config.tls_cert, config.tls_key)
        # Handshakes happen on first read, in the handler thread: a slow or silent client
        # (a bare TCP probe) never blocks the accept loop.
        server.socket = context.wrap_socket(server.socket, server_side=True,
                                            do_handshake_on_connect=False)
    sys.stdout.write(f"token service listening on {config.host}:{config.port}\n")
    sys.stdout.flush()
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True)
    args = parser.parse_args(argv)
    serve(TokenServiceConfig.model_validate_json(args.config.read_text()))


if __name__ == "__main__":
    main()
