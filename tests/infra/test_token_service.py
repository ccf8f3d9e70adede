"""Token service logic without sockets: scope parsing, granting, and the JWT distribution reads."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import bcrypt
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from imagekit.infra import pki
from imagekit.infra.state import StatePaths
from imagekit.infra.token_service import TokenIssuer, TokenServiceConfig, grant, parse_scope


def test_parse_scope() -> None:
    assert parse_scope("repository:a/b:pull,push") == ("repository", "a/b", ["pull", "push"])
    assert parse_scope("repository:127.0.0.1:5003/a:pull") == (
        "repository", "127.0.0.1:5003/a", ["pull"])
    assert parse_scope("registry:catalog:*") == ("registry", "catalog", ["*"])
    assert parse_scope("nonsense") is None
    assert parse_scope("repository::pull") is None


def test_grant_intersects_with_allowed_actions() -> None:
    full = ["pull", "push", "delete"]
    assert grant(["repository:a:pull,push"], full) == [
        {"type": "repository", "name": "a", "actions": ["pull", "push"]}]
    assert grant(["repository:a:pull,push"], ["pull"]) == [
        {"type": "repository", "name": "a", "actions": ["pull"]}]
    assert grant(["repository:a:*"], ["pull"]) == [
        {"type": "repository", "name": "a", "actions": []}]
    assert grant(["registry:catalog:*"], full) == [
        {"type": "registry", "name": "catalog", "actions": ["*"]}]
    # several scopes, space-separated or repeated, merge per resource
    assert grant(["repository:a:pull repository:b:push", "repository:a:push"], full) == [
        {"type": "repository", "name": "a", "actions": ["pull", "push"]},
        {"type": "repository", "name": "b", "actions": ["push"]}]


@pytest.fixture
def issuer(tmp_path: Path) -> TokenIssuer:
    paths = StatePaths(tmp_path)
    pki.ensure_token_signing_cert(paths)
    users = tmp_path / "users.json"
    users.write_text(json.dumps({"alice": {
        "bcrypt": bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode(), "actions": ["pull"]}}))
    return TokenIssuer(TokenServiceConfig(signing_key=paths.token_key,
                                          signing_cert=paths.token_cert, users_file=users,
                                          issuer="iss", service="svc"))


def test_authenticate(issuer: TokenIssuer) -> None:
    assert issuer.authenticate("alice", "pw") == ["pull"]
    assert issuer.authenticate("alice", "wrong") is None
    assert issuer.authenticate("bob", "pw") is None


def test_token_is_es256_with_x5c_and_access_claims(issuer: TokenIssuer) -> None:
    body = issuer.issue("alice", ["pull"], ["repository:x/y:pull,push"])
    token = body["token"]
    assert body["access_token"] == token and body["expires_in"] > 0
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "ES256"
    cert = x509.load_der_x509_certificate(base64.b64decode(header["x5c"][0]))
    assert cert.public_bytes(serialization.Encoding.PEM) == \
        issuer.config.signing_cert.read_bytes()
    claims = jwt.decode(token, cert.public_key(), algorithms=["ES256"], audience="svc",
                        issuer="iss")
    assert claims["sub"] == "alice"
    assert claims["access"] == [{"type": "repository", "name": "x/y", "actions": ["pull"]}]
    assert claims["nbf"] <= claims["iat"] < claims["exp"]
