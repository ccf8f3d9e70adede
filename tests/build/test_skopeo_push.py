"""The stand-ins' push (imagekit.engine.skopeo): skopeo copies the daemon's image to the
registry; a second push of the same image sends nothing; a tag that names another image is
pushed again; the mirror copy is the same manifest. Trust follows the docker engine's rules."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from imagekit.engine import skopeo
from imagekit.errors import TransportError
from imagekit.oci import Digest, ImageReference


def test_loopback_registries_are_the_engines_insecure_ones(tmp_path: Path) -> None:
    none = tmp_path / "none"
    for registry in ("127.0.0.1:5001", "127.3.2.1", "localhost:5000", "[::1]:5000", "::1"):
        assert "--dest-tls-verify=false" in skopeo.trust_args(
            registry, "dest", none, certs_d=none), registry
    for registry in ("registry.example.com", "10.0.0.1:5000", "ghcr.io"):
        assert "--dest-tls-verify=false" not in skopeo.trust_args(
            registry, "dest", none, certs_d=none), registry


def test_trust_args_follow_docker(tmp_path: Path, monkeypatch) -> None:
    certs = tmp_path / "certs.d"
    (certs / "relay.example.com:5443").mkdir(parents=True)
    config = tmp_path / "docker-config"
    config.mkdir()
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    # no config file anywhere: no authfile; loopback: no TLS verification
    assert skopeo.trust_args("127.0.0.1:5001", "dest", certs_d=certs) == \
        ["--dest-tls-verify=false"]
    # a remote registry keeps verification on, with docker's CA folder when it has one
    assert skopeo.trust_args("relay.example.com:5443", "src", certs_d=certs) == \
        ["--src-cert-dir", str(certs / "relay.example.com:5443")]
    assert skopeo.trust_args("ghcr.io", "dest", certs_d=certs) == []
    # the engine's config file: a path, never a secret in argv
    (config / "config.json").write_text('{"auths": {}}')
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    assert skopeo.trust_args("ghcr.io", None, certs_d=certs) == \
        ["--authfile", str(config / "config.json")]


def test_a_missing_skopeo_is_one_line(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(TransportError, match="skopeo is not installed"):
        skopeo.config_in_registry(ImageReference.parse("127.0.0.1:9/x/y:z"))


def _manifest(reference: str) -> dict:
    done = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false",
                           f"docker://{reference}"], capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.mark.docker
@pytest.mark.registry
def test_push_sends_once_and_again_only_when_the_tag_moved(engine, tmp_path: Path) -> None:
    from imagekit.infra.peers import ensure_peer
    from imagekit.standins import ensure_rootfs_image

    ensure_peer("skopeo")
    base, _ = ensure_rootfs_image(engine, [])
    reference = ImageReference.parse(f"127.0.0.1:5001/imagekit-test/skopeo-push:{tmp_path.name}")
    tags = []
    for content in ("one", "two"):
        context = tmp_path / content
        context.mkdir()
        (context / "Dockerfile").write_text(f"FROM {base}\nRUN echo {content} > /which\n")
        tag = f"imagekit-test/skopeo-push:{content}-{tmp_path.name}"
        assert engine.build(context, tags=[tag]).ok
        tags.append(tag)
    first_id = engine.inspect(tags[0]).id

    first = skopeo.push(tags[0], first_id, reference, config_dir=engine.config_dir)
    assert first.sent
    manifest = _manifest(str(reference))
    # the registry holds this image: its config is the image ID, its layers gzip
    assert Digest.parse(manifest["config"]["digest"]) == first_id
    assert all(layer["mediaType"].endswith("gzip") for layer in manifest["layers"])

    again = skopeo.push(tags[0], first_id, reference, config_dir=engine.config_dir)
    assert not again.sent and again.digest == first.digest

    second_id = engine.inspect(tags[1]).id
    moved = skopeo.push(tags[1], second_id, reference, config_dir=engine.config_dir)
    assert moved.sent and moved.digest != first.digest

    mirror = ImageReference.parse(f"127.0.0.1:5001/imagekit-test/skopeo-mirror:{tmp_path.name}")
    assert skopeo.copy(reference, moved.digest, mirror,
                       config_dir=engine.config_dir) == moved.digest
