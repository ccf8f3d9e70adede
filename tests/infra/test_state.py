"""InfraState: the contract other layers read, its file, and its errors."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from imagekit.errors import InfraError
from imagekit.infra import credentials, pki, registries
from imagekit.infra.manager import _initial_state
from imagekit.infra.state import (
    InfraState,
    StatePaths,
    load_state,
    registry_env,
    save_state,
    state_dir,
)


def test_state_dir_is_an_argument(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """$IMAGEKIT_STATE_DIR is read by the CLI (imagekit.settings) and handed down: infra/state
    takes the directory it is given, else /var/lib/imagekit, whatever the process carries."""
    from imagekit.settings import load

    monkeypatch.setenv("IMAGEKIT_STATE_DIR", str(tmp_path / "ignored"))
    assert state_dir() == StatePaths().root == Path("/var/lib/imagekit")
    given = load({"IMAGEKIT_STATE_DIR": str(tmp_path)}).state_dir
    assert state_dir(given) == StatePaths(given).root == tmp_path
    assert load({"IMAGEKIT_STATE_DIR": ""}).state_dir is None       # empty = unset, as before
    with pytest.raises(InfraError) as caught:
        load_state(given)
    assert caught.value.where == str(tmp_path / "state.json")


def test_missing_state_says_which_command(tmp_path: Path) -> None:
    with pytest.raises(InfraError, match=r"run `imagekit infra up`"):
        load_state(tmp_path)


def test_corrupt_state_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.json").write_text("{not json")
    with pytest.raises(InfraError, match="unreadable infrastructure state"):
        load_state(tmp_path)


def test_round_trip_and_contract(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    state = _initial_state(paths)
    save_state(state)
    loaded = load_state(tmp_path)
    assert loaded == state
    assert isinstance(loaded, InfraState)
    staging, production, target = (loaded.registries[n] for n in ("staging", "production",
                                                                   "target"))
    assert (staging.address, staging.scheme, staging.auth, staging.ca_file) == (
        "127.0.0.1:5001", "http", "none", None)
    assert (production.address, production.scheme, production.auth) == (
        "127.0.0.1:5002", "https", "basic")
    assert production.ca_file == loaded.ca_file == paths.ca_cert
    assert (target.address, target.auth, target.token_realm) == (
        "127.0.0.1:5003", "bearer", "https://127.0.0.1:5010/token")
    assert registry_env(loaded)["DOCKER_CONFIG"] == str(paths.docker_config_dir)
    with pytest.raises(InfraError, match="no registry named"):
        loaded.registry("nope")


def test_files_are_private_and_idempotent(tmp_path: Path) -> None:
    paths = StatePaths(tmp_path)
    creds = registries.ensure_files(paths)
    first = {p: p.read_bytes() for p in (paths.ca_cert, paths.server_cert, paths.token_cert,
                                          paths.credentials, credentials.htpasswd_path(paths))}
    assert registries.ensure_files(paths) == creds
    assert {p: p.read_bytes() for p in first} == first  # nothing remade on a second run
    for private in (paths.credentials, paths.ca_key, paths.server_key, paths.token_key,
                    credentials.htpasswd_path(paths), credentials.token_users_path(paths),
                    paths.docker_config_dir / "config.json"):
        assert stat.S_IMODE(private.stat().st_mode) == 0o600, private
    config = json.loads((paths.docker_config_dir / "config.json").read_text())
    assert set(config["auths"]) == {"127.0.0.1:5002", "127.0.0.1:5003"}


def test_server_cert_covers_loopback(tmp_path: Path) -> None:
    from cryptography import x509

    paths = StatePaths(tmp_path)
    pki.ensure_server_cert(paths)
    cert = x509.load_pem_x509_certificate(paths.server_cert.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    ca = x509.load_pem_x509_certificate(paths.ca_cert.read_bytes())
    cert.verify_directly_issued_by(ca)
