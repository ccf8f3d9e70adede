"""A stand-in rehearsal's evidence, written through the real EvidenceStore (no mocks).

Written through the evidence contract as the producers do (docs/design/evidence.md): a build keyed
by name whose subjects are the pushed digest and the image ID, probes keyed by the image ID, the
image manifest (images-verify), promotion hops, a GPU all-reduce preflight, acceptance checks
and bench latency percentiles — each kind's result model.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagekit.evidence import EvidenceStore, Role, Subject, kinds
from imagekit.oci import Digest
from imagekit.oci import mediatypes as mt
from imagekit.registry import ManifestBlob, RegistryClient, RegistryOptions
from imagekit.results import CheckResult, Status

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def fake_digest(label: str) -> str:
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


@dataclass
class Rehearsal:
    store: EvidenceStore
    digest: str          # pushed manifest digest (what is promoted)
    image_id: str        # config digest (what local probes are keyed by)
    base: str
    endpoints: dict[str, tuple[str, str]]   # endpoint -> (reference, digest)


def P(name: str, detail: str = "", **data: object) -> CheckResult:
    return CheckResult(name=name, status=Status.PASS, detail=detail, data=dict(data))


def push_tiny_image(registry: str, repository: str, tag: str) -> Digest:
    """A fresh one-config, no-layer image pushed to a plain-HTTP loopback registry; its digest."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "created": secrets.token_hex(4),
                         "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    config_digest = Digest.of_bytes(config)
    manifest = json.dumps({"schemaVersion": 2, "mediaType": mt.OCI_MANIFEST,
                           "config": {"mediaType": mt.OCI_CONFIG, "digest": str(config_digest),
                                      "size": len(config)}, "layers": []}).encode()
    blob = ManifestBlob(manifest, mt.OCI_MANIFEST, Digest.of_bytes(manifest))
    with RegistryClient(registry, RegistryOptions(insecure=frozenset({registry}))) as client:
        client.upload_blob(repository, config_digest, lambda: iter([config]))
        return client.put_manifest(repository, tag, blob)


def write_rehearsal(store: EvidenceStore, label: str = "sglang", *,
                    media_fail: bool = False, torch_arch: Status = Status.PASS,
                    promote: bool = True, preflight: bool = True,
                    profile: str | None = None) -> Rehearsal:
    """Each kind written through its result model and subjects, as the producers do."""
    digest, image_id = fake_digest(f"{label}-manifest"), fake_digest(f"{label}-config")
    base = fake_digest(f"{label}-base")
    staged = f"127.0.0.1:5001/{label}-fixed@{digest}"
    with store.attempt(f"{label}-fixed", "build", subjects=[
            Subject.of(digest, Role.SUBJECT, staged), Subject.of(image_id, Role.ALIAS),
            Subject.of(base, Role.BASE)]) as a:
        a.write_text("build.log", "#1 [internal] load build definition\n#9 DONE 35.2s\n")
        a.write_result(kinds.BuildResult(name=label, profile=profile, base_digest=base,
                                         image_id=image_id, digest=digest))
        a.add_check(P("build", "docker build exited 0"))
        a.add_check(P("push", f"pushed to {staged}"))
    # a first probe attempt broke before it ran checks (kept, superseded by the rerun)
    with pytest.raises(RuntimeError), store.attempt(image_id, "probe", image=label):
        raise RuntimeError("container exited before the probe started")
    with store.attempt(image_id, "probe") as a:
        a.write_text("pip_check.log", "No broken requirements found.\n")
        a.write_result(kinds.ProbeResult(image=label, probes=[
            "pip_check", "find_spec", "av_roundtrip", "cli_help", "torch_arch"]))
        a.add_check(P("pip_check", "No broken requirements found."))
        a.add_check(P("find_spec", "find_spec('nixl') is not None"))
        a.add_check(P("av_roundtrip", "AV_ROUNDTRIP_PASS 8"))
        a.add_check(P("cli_help", "python3 -m sglang.launch_server --help exited 0"))
        a.add_check(CheckResult(name="torch_arch", status=torch_arch,
                                detail="sm_90 in torch.cuda.get_arch_list()"
                                if torch_arch is Status.PASS else
                                "CPU torch build: get_arch_list() is [] (needs a GPU image)"))
    with store.attempt(digest, "images-verify", subjects=[
            Subject.of(digest), Subject.of(image_id, Role.ALIAS),
            Subject.of(base, Role.BASE)]) as a:
        a.write_result(kinds.ImagesVerifyResult(
            image=label, profile=profile, digest=digest, image_id=image_id, base_digest=base,
            versions={"python": "3.11.2", "torch": "2.13.0", "nixl": "1.2.0",
                      "nixl-cu12": "1.2.0", "nixl-cu13": "1.2.0", "pillow": "11.3.0",
                      "av": "16.1.0", "engine": "sglang 0.5.6"},
            fix_layers=["python3 -m pip install --no-cache-dir nixl-cu12==1.2.0 "
                        "pillow==11.3.0"], verdict=Status.PASS))
        a.add_check(P("manifest", "final versions recorded"))
        a.add_check(P("base-digest", f"built FROM {base}"))
    endpoints = {}
    if promote:   # imagekit.promote's evidence: each hop read back at its endpoint
        hops = []
        for name, port in (("staging", 5001), ("production", 5002), ("target", 5003)):
            reference = f"127.0.0.1:{port}/{label}-fixed:rehearsal"
            endpoints[name] = (reference, digest)
            moved = 0 if name == "staging" else 52_428_800
            hops.append(kinds.HopEvidence(endpoint=reference, registry=f"127.0.0.1:{port}",
                                          digest=digest, verified=True, bytes_moved=moved,
                                          read_back="manifest by digest and by tag, hashed"))
        with store.attempt(digest, "promote") as a:
            a.write_result(kinds.PromoteEvidence(source=hops[0].endpoint, digest=digest,
                                                 via=[hops[1].endpoint], to=hops[2].endpoint,
                                                 hops=hops[1:]))
            for n, hop in enumerate(hops, 1):
                a.add_check(P(f"hop-{n}", f"{hop.endpoint} serves {digest}"))
    if preflight:   # imagekit.gpu's evidence: the all-reduce sizes
        sizes = []
        for power in range(10, 31, 4):
            n = 2 ** power
            algbw = round(0.5 * power - 4.0, 3)
            sizes.append(kinds.BandwidthSample(bytes=n, algbw_GBps=algbw,
                                               busbw_GBps=round(algbw * 2 * 7 / 8, 3)))
        with store.attempt(digest, "gpu-preflight") as a:
            a.write_result(kinds.GpuPreflightResult(world_size=8, backend="nccl", sizes=sizes))
            a.write_text("preflight.log", "all-reduce sums correct\n")
            a.add_check(P("allreduce-correct", "element sums equal world_size"))
            a.add_check(P("bf16-finite", "matmul finite on 8 GPUs"))
    with store.attempt(digest, "accept-functional") as a:
        a.write_result(kinds.AcceptResult(kind="accept-functional", suite="functional"))
        for name in ("thinking-modes", "tool-call", "streaming", "multi-turn"):
            a.add_check(P(name))
    with store.attempt(digest, "accept-media") as a:
        a.write_result(kinds.AcceptResult(kind="accept-media", suite="media"))
        a.add_check(P("image-understanding"))
        a.add_check(CheckResult(
            name="corrupted-media-status", status=Status.FAIL if media_fail else Status.PASS,
            detail="invalid PNG returned 500, expected 400" if media_fail else "400 for both"))
    with store.attempt(digest, "bench") as a:
        latency = []
        for index, (concurrency, scale) in enumerate(((1, 1.0), (4, 2.5)), 1):
            for metric, base_s in (("ttft", 0.08), ("itl", 0.012), ("e2e", 1.6)):
                latency.append(kinds.Latency(
                    label=f"round-{index:02d}-text-c{concurrency}", metric=metric, unit="s",
                    percentiles={"p50": base_s * scale, "p90": base_s * scale * 1.7,
                                 "p99": base_s * scale * 3.2}))
        a.write_result(kinds.BenchResult(matrix="main", rounds=2, requests=240,
                                         latency=latency))
        a.add_check(P("totals", "0 errors in 240 requests"))
    return Rehearsal(store=store, digest=digest, image_id=image_id, base=base,
                     endpoints=endpoints)


@pytest.fixture()
def store(tmp_path: Path) -> EvidenceStore:
    return EvidenceStore(tmp_path / "evidence")


@pytest.fixture()
def rehearsal(store: EvidenceStore) -> Rehearsal:
    return write_rehearsal(store)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's chromium; installed with apt when missing (tests run as root in CI)."""
    found = shutil.which("chromium")
    if found is None and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        wait = ["-o", "DPkg::Lock::Timeout=600"]       # other setup may hold the dpkg lock
        install = ["apt-get", *wait, "install", "-y", "--no-install-recommends", "chromium"]
        if subprocess.run(install, env=env, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", *wait, "update"], env=env, capture_output=True)
            subprocess.run(install, env=env, capture_output=True)
        found = shutil.which("chromium")
    if found is None:   # a browser check that cannot run fails: it never skips silently
        pytest.fail("chromium is not installed and could not be apt-installed: the HTML "
                    "report is checked in a real browser (as root: apt-get update && "
                    "apt-get install -y chromium)")
    return found


SPEC_TEXT = """
version = 1
default_profile = "local"

[images.sglang]
engine = "sglang"
dockerfile = "sglang/Dockerfile"
repository = "imagekit/sglang"
probes = ["pip_check", "find_spec", "av_roundtrip", "cli_help", "torch_arch"]

[images.sglang.base]
local = "127.0.0.1:5001/imagekit-standins/sglang-base:cu13-standin"
production = "docker.io/lmsysorg/sglang:v0.5.5-cu130"

[images.vllm]
engine = "vllm"
dockerfile = "vllm/Dockerfile"
repository = "imagekit/vllm"
probes = ["pip_check", "av_roundtrip", "cli_help", "torch_arch"]

[images.vllm.base]
local = "127.0.0.1:5001/imagekit-standins/vllm-base:standin"
production = "docker.io/vllm/vllm-openai:v0.11.0"

[profiles.local]
lock = "images.local.lock"
standins = true
staging = "127.0.0.1:5001"
production = "127.0.0.1:5002"
target = "127.0.0.1:5003"

[profiles.local.accept]
"sglang.torch_arch" = { status = "FAIL", reason = "the stand-in carries the machine's CPU \
torch build (no sm_90)" }
"vllm.torch_arch" = { status = "DEFERRED", reason = "the vLLM stand-in carries no torch" }

[profiles.production]
lock = "images.lock"
staging = "relay.example.internal/staging"
production = "relay.example.internal/production"
target = "registry.target.example.internal/llm"
"""


@pytest.fixture()
def spec_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A small images spec (the checkout's shape and `local` acceptances), so these tests do
    not change when the real spec's entries do. The operations called in-process find it where
    the default spec is looked for first (./dockerfiles/images.toml: the test runs in
    tmp_path; nothing below the CLI reads $IMAGEKIT_IMAGES_SPEC); a CLI started from the test
    gets it by $IMAGEKIT_IMAGES_SPEC."""
    root = tmp_path / "dockerfiles"
    for name in ("sglang", "vllm"):
        (root / name).mkdir(parents=True)
        (root / name / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\n")
    path = root / "images.toml"
    path.write_text(SPEC_TEXT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IMAGEKIT_IMAGES_SPEC", str(path))
    return path
