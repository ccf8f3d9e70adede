"""Hostile input, round 2: the newer surfaces — keys, attest, verify,
referrers, --await, --platform, cluster accept, model-volume, gpu-preflight --nodes — tried as a
hostile user and a hostile registry would.

Every case is the CLI as a process with a fresh evidence store, run a few at a time in one
module fixture (as the round-1 sweep in tests/unit/test_bad_input_sweep.py, whose cases stay
there). Each must end within 5 s with exit 2 (bad input: one line `imagekit: error: … (…)` on
stderr) or 1 (a check that ran and failed), no traceback, no PASS in evidence, no attempt left
`running.json`, and nothing written at our hostile registry's `sink` (the destination of every
promote case). The registry is ours (tests/registry/hostile_referrers.py: one misbehaviour per
repository); the cluster is never reached — KUBECONFIG and the infra state point at empty
places, so a check done too late shows as a different (slow) error, never as a pass.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from .hostile_referrers import ReferrersRegistry, closed_port

REPO = Path(__file__).resolve().parents[2]
BOUND_S = 5.0
CLOSED = closed_port()
REF = f"127.0.0.1:{CLOSED}/imagekit/x:y"          # nothing listens there
PINNED = f"127.0.0.1:{CLOSED}/imagekit/x@sha256:" + "a" * 64
DIGEST_ARG = "sha256:" + "b" * 64


def _keys(root: Path) -> dict[str, Path]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    f: dict[str, Path] = {}

    def put(name: str, data: bytes, mode: int = 0o600) -> Path:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
        f[name] = path
        return path

    pkcs8 = dict(encoding=serialization.Encoding.PEM, format=serialization.PrivateFormat.PKCS8,
                 encryption_algorithm=serialization.NoEncryption())
    spki = dict(encoding=serialization.Encoding.PEM,
                format=serialization.PublicFormat.SubjectPublicKeyInfo)
    p256 = ec.generate_private_key(ec.SECP256R1())
    put("good.key", p256.private_bytes(**pkcs8))
    put("open.key", p256.private_bytes(**pkcs8), 0o644)
    put("good.pub", p256.public_key().public_bytes(**spki), 0o644)
    put("pub-as-private.key", p256.public_key().public_bytes(**spki))
    put("rsa.key", rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(**pkcs8))
    put("p384.pub", ec.generate_private_key(ec.SECP384R1()).public_key().public_bytes(**spki),
        0o644)
    put("notpem.pem", b"this is not a certificate\n", 0o644)
    put("file-not-dir", b"x", 0o644)
    fifo = root / "key.fifo"
    os.mkfifo(fifo, 0o600)
    f["fifo"] = fifo
    # keys generate targets
    has_pub = root / "has-pub"
    has_pub.mkdir(mode=0o700)
    (has_pub / "imagekit.pub").write_text("someone's public key\n")
    f["has-pub"] = has_pub
    linked = root / "linked"
    linked.mkdir(mode=0o700)
    (linked / "imagekit.pub").symlink_to(root / "elsewhere.pub")
    f["linked"] = linked
    open_dir = root / "open-dir"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    f["open-dir"] = open_dir
    return f


def _cases(R: ReferrersRegistry) -> list[tuple]:
    """(id, argv builder(F), exit codes allowed, words the output must hold, extra env)."""
    sink = R.ref("sink")
    force = ["--force", "--reason", "sweep"]

    def promote_from(mode: str, *extra: str) -> object:
        return lambda F: ["promote", R.ref(mode), "--to", sink, *force, *extra]

    def verify(mode: str) -> object:
        return lambda F: ["verify-attestations", R.ref(mode), "--trust-key", str(F["good.pub"])]

    cases: list[tuple] = [
        # -- the signing key: checked before the gate and before any copy ----------------------
        ("promote-key-missing", lambda F: ["promote", R.ref("ok"), "--to", sink, *force, "--key",
                                           str(F["file-not-dir"].parent / "nokey")], {2},
         "not found", {}),
        ("promote-key-world-readable", promote_from("ok", "--key", "{open.key}"), {2},
         "readable by others", {}),
        ("promote-key-public", promote_from("ok", "--key", "{pub-as-private.key}"), {2},
         "public key", {}),
        ("promote-key-rsa", promote_from("ok", "--key", "{rsa.key}"), {2}, "P-256", {}),
        ("promote-key-dev-null", promote_from("ok", "--key", "/dev/null"), {2},
         "not a regular file", {}),
        ("attest-key-dev-zero", lambda F: ["attest", R.ref("ok"), "--type", "test-result",
                                           "--key", "/dev/zero"], {2}, "not a regular file", {}),
        ("attest-key-fifo", lambda F: ["attest", R.ref("ok"), "--type", "test-result", "--key",
                                       str(F["fifo"])], {2}, "not a regular file", {}),
        ("attest-key-world-readable", lambda F: ["attest", R.ref("ok"), "--type", "test-result",
                                                 "--key", str(F["open.key"])], {2},
         "readable by others", {}),
        ("verify-key-dev-zero", lambda F: ["verify-attestations", R.ref("ok"), "--trust-key", "/dev/zero"], {2},
         "not a regular file", {}),
        ("verify-key-fifo", lambda F: ["verify-attestations", R.ref("ok"), "--trust-key", str(F["fifo"])], {2},
         "not a regular file", {}),
        ("verify-key-p384", lambda F: ["verify-attestations", R.ref("ok"), "--trust-key", str(F["p384.pub"])], {2},
         "P-256", {}),
        ("verify-key-private", lambda F: ["verify-attestations", R.ref("ok"), "--trust-key", str(F["good.key"])],
         {2}, "public key", {}),
        # -- profiles: '' is not the default ---------------------------------------------------
        ("rehearsal-profile-empty", lambda F: ["rehearsal", "--profile", ""], {2}, "empty", {}),
        ("report-profile-empty", lambda F: ["report", DIGEST_ARG, "--profile", ""], {2},
         "empty", {}),
        ("gate-profile-empty", lambda F: ["gate", DIGEST_ARG, "--profile", ""], {2}, "empty", {}),
        ("accept-profile-empty", lambda F: ["cluster", "accept", PINNED, "--profile", ""], {2},
         "empty", {}),
        ("rehearsal-out-proc", lambda F: ["rehearsal", "--out-dir", "/proc/imagekit-x"], {2},
         "--out-dir", {}),
        # -- --platform: validated, and checked against the source -----------------------------
        ("promote-platform-mismatch", promote_from("ok", "--only-platform", "linux/arm64"), {2},
         "single-platform", {}),
        ("promote-platform-unicode", promote_from("ok", "--only-platform", "ü/ö"), {2}, "platform",
         {}),
        ("promote-platform-empty", promote_from("ok", "--only-platform", ""), {2}, "platform", {}),
        ("promote-await-source", lambda F: ["promote", R.ref("ok"), "--await", R.ref("ok"),
                                            *force], {2}, "nothing would be moved", {}),
        # -- Kubernetes names ----------------------------------------------------------------
        ("model-volume-label-node", lambda F: ["cluster", "model-volume", "--label-node",
                                               "../namespaces/kube-system"], {2},
         "--label-node", {}),
        ("precheck-model-claim", lambda F: ["cluster", "precheck", "--model-claim",
                                            "../../../nodes"], {2}, "--model-claim", {}),
        ("nodes-priority-class", lambda F: ["cluster", "gpu-preflight", PINNED, "--nodes", "2",
                                            "--gpus-per-node", "1", "--priority-class", "../x"],
         {2}, "--priority-class", {}),
        ("nodes-env-name", lambda F: ["cluster", "gpu-preflight", PINNED, "--nodes", "2",
                                      "--gpus-per-node", "1", "--env", "BAD KEY=1"], {2},
         "--env", {}),
        # -- gpu-preflight --nodes bounds --------------------------------------------------------
        ("nodes-timeout-inf", lambda F: ["cluster", "gpu-preflight", PINNED, "--nodes", "1",
                                         "--gpus-per-node", "0", "--pod-timeout", "inf"], {2},
         "finite", {}),
        ("nodes-timeout-neg", lambda F: ["cluster", "gpu-preflight", PINNED, "--nodes", "2",
                                         "--gpus-per-node", "1", "--pod-timeout", "-100"], {2},
         "--pod-timeout", {}),
        ("nodes-billion", lambda F: ["cluster", "gpu-preflight", PINNED, "--nodes",
                                     "1000000000", "--gpus-per-node", "1"], {2}, "--nodes", {}),
        ("nodes-100000-dry-run", lambda F: ["cluster", "gpu-preflight", PINNED, "--nodes",
                                            "100000", "--gpus-per-node", "1"], {2}, "--nodes",
         {}),
        ("nodes-gpus-per-node-huge", lambda F: ["cluster", "gpu-preflight", PINNED, "--nodes",
                                                "2", "--gpus-per-node", "100000"], {2},
         "--gpus-per-node", {}),
        # -- cluster accept: every option before the gate ------------------------------------
        ("accept-selector", lambda F: ["cluster", "accept", PINNED, "--selector", "bad key=x"],
         {2}, "label key", {}),
        ("accept-toleration", lambda F: ["cluster", "accept", PINNED, "--toleration", "nope"],
         {2}, "toleration", {}),
        ("accept-kubeconfig", lambda F: ["cluster", "accept", PINNED, "--kubeconfig",
                                         "/nonexistent-kubeconfig"], {2}, "--kubeconfig", {}),
        ("accept-engine-env", lambda F: ["cluster", "accept", PINNED, "--engine-env",
                                         "BAD KEY=1"], {2}, "--engine-env", {}),
        ("accept-max-tokens-0", lambda F: ["cluster", "accept", PINNED, "--max-tokens", "0"],
         {2}, "--max-tokens", {}),
        # -- IMAGEKIT_DEADLINE: finite and positive, the variable named --------------------------
        *[(f"deadline-{cmd}-{name}", argv, {2}, "IMAGEKIT_DEADLINE",
           {"IMAGEKIT_DEADLINE": value})
          for name, value in (("nan", "nan"), ("neg", "-5"), ("zero", "0"), ("huge", "1e400"),
                              ("abc", "abc"))
          for cmd, argv in (("verify-attestations", verify("ok")),
                            ("attest", lambda F: ["attest", R.ref("ok"), "--type",
                                                  "test-result", "--key", str(F["good.key"])]),
                            ("report", lambda F: ["report", DIGEST_ARG]))
          if cmd != "report" or name in ("nan", "abc")],
        # -- evidence directories, CA files ----------------------------------------------------
        ("attest-evidence-file", lambda F: ["attest", R.ref("ok"), "--type", "test-result",
                                            "--key", str(F["good.key"]), "--evidence-dir",
                                            str(F["file-not-dir"])], {2}, "--evidence-dir", {}),
        ("attest-evidence-unwritable", lambda F: ["attest", R.ref("ok"), "--type",
                                                  "test-result", "--key", str(F["good.key"]),
                                                  "--evidence-dir", "/proc/imagekit-no/ev"],
         {2}, "--evidence-dir", {}),
        ("attest-ca-notpem", lambda F: ["attest", R.ref("ok"), "--type", "test-result", "--key",
                                        str(F["good.key"]), "--ca-file", str(F["notpem.pem"])],
         {2}, "PEM", {}),
        ("verify-ca-notpem", lambda F: ["verify-attestations", R.ref("ok"), "--trust-key", str(F["good.pub"]),
                                        "--ca-file", str(F["notpem.pem"])], {2}, "PEM", {}),
        # -- keys generate --out ---------------------------------------------------------------
        ("keys-out-empty", lambda F: ["keys", "generate", "--out-dir", ""], {2}, "--out", {}),
        ("keys-out-pub-exists", lambda F: ["keys", "generate", "--out-dir", str(F["has-pub"])], {2},
         "exists already", {}),
        ("keys-out-symlink", lambda F: ["keys", "generate", "--out-dir", str(F["linked"])], {2},
         "symlink", {}),
        ("keys-out-0777", lambda F: ["keys", "generate", "--out-dir", str(F["open-dir"])], {2},
         "writable by others", {}),
        # -- hostile referrer documents: verify ----------------------------------------------
        ("verify-tag-manifests-string", verify("tag-str"), {2}, "tag schema index", {}),
        ("verify-tag-manifests-numbers", verify("tag-nums"), {2}, "tag schema index", {}),
        ("verify-api-null", verify("api-null"), {2}, "referrers API index", {}),
        ("verify-annotations-list", verify("ann-list"), {2}, "annotations", {}),
        ("verify-predicatetype-object", verify("ptype-object"), {2}, "annotations", {}),
        ("verify-referrer-json-list", verify("ref-list"), {1}, "referrer manifest", {}),
        ("verify-referrer-layers-int", verify("ref-layers-int"), {1}, "layers", {}),
        ("verify-bundle-size-string", verify("bundle-size-str"), {1}, "size", {}),
        ("verify-10000-missing", verify("missing-10000"), {2}, "at most 4096", {}),
        ("verify-one-listed-2000", verify("dup-2000"), {1}, "missing attestation", {}),
        ("verify-referrers-500", verify("api-500"), {2}, "referrers listing failed", {}),
        ("verify-realm-closed", verify("realm-closed"), {2}, "token realm", {}),
        # -- hostile referrer documents: promote (nothing pushed, an ERROR attempt kept) -------
        ("promote-tag-manifests-numbers", promote_from("tag-nums"), {2}, "tag schema index", {}),
        ("promote-api-null", promote_from("api-null"), {2}, "referrers API index", {}),
        ("promote-referrer-json-list", promote_from("ref-list"), {2}, "referrer manifest", {}),
        ("promote-referrer-layers-int", promote_from("ref-layers-int"), {2}, "layers", {}),
        ("promote-bundle-size-string", promote_from("bundle-size-str"), {2}, "size", {}),
        # -- --await and every poll: the deadline is a wall clock ------------------------------
        ("await-500-deadline-2", lambda F: ["promote", R.ref("ok"), "--await", R.ref("all-500"),
                                            "--await-timeout", "2", *force], {1},
         "not served within 2 s", {}),
        ("await-silent-deadline-2", lambda F: ["promote", R.ref("ok"), "--await",
                                               R.ref("silent"), "--await-timeout", "2",
                                               *force], {1}, "not served within 2 s", {}),
    ]
    return cases


def _expand(args: list[str], files: dict[str, Path]) -> list[str]:
    return [str(files[a[1:-1]]) if a.startswith("{") and a.endswith("}") and a[1:-1] in files
            else a for a in args]


@pytest.fixture(scope="module")
def hostile():
    with ReferrersRegistry() as registry:
        yield registry


@pytest.fixture(scope="module")
def sweep(hostile: ReferrersRegistry, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("sweep2")
    files = _keys(root / "files")
    state = root / "state"
    state.mkdir()
    cases = _cases(hostile)

    def run(case: tuple) -> tuple[str, tuple]:
        name, argv, _, _, extra = case
        evidence = root / "evidence" / name
        evidence.mkdir(parents=True)  # an existing, empty store (attest refuses a missing one)
        env = {**os.environ, "PYTHONPATH": str(REPO), "IMAGEKIT_EVIDENCE_DIR": str(evidence),
               "IMAGEKIT_STATE_DIR": str(state), "KUBECONFIG": str(root / "no-kubeconfig"),
               "DOCKER_CONFIG": str(root / "no-docker-config"), "NO_COLOR": "1",
               "IMAGEKIT_KEY_DIR": str(root / "no-keys"), **extra}
        for knob in ("IMAGEKIT_DEBUG", "IMAGEKIT_SIGNING_KEY", "IMAGEKIT_RETRY_WAIT_INITIAL",
                     "IMAGEKIT_RETRY_WAIT_MAX", "IMAGEKIT_RETRY_AFTER_MAX"):
            env.pop(knob, None)  # the defaults a user gets
        args = _expand(argv(files), files)
        out_file, err_file = root / f"{name}.out", root / f"{name}.err"
        started = time.monotonic()
        with open(out_file, "wb") as out, open(err_file, "wb") as err:
            child = subprocess.Popen([sys.executable, "-m", "imagekit", *args], cwd=REPO,
                                     env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        killer = threading.Timer(60, child.kill)
        killer.start()
        _, status, usage = os.wait4(child.pid, 0)
        killer.cancel()
        wall = time.monotonic() - started
        return name, (os.waitstatus_to_exitcode(status), out_file.read_text(errors="replace"),
                      err_file.read_text(errors="replace"), wall,
                      usage.ru_utime + usage.ru_stime, evidence, args)

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        results = dict(pool.map(run, cases))
    (root / "summary.txt").write_text("\n".join(
        f"{n} rc={r[0]} wall={r[3]:.1f} cpu={r[4]:.2f} {r[2].strip()[:150]!r}"
        for n, r in results.items()))
    return results


def _records(evidence: Path, name: str) -> list[Path]:
    return list(evidence.rglob(name)) if evidence.exists() else []


def _passes_in(evidence: Path) -> list[str]:
    found = []
    for record in _records(evidence, "attempt.json"):
        try:
            if json.loads(record.read_text()).get("status") == "PASS":
                found.append(str(record))
        except ValueError:
            pass
    return found


def _case_table() -> list[tuple[str, set, str]]:
    """(id, codes, words) without a live server: the argv builders are not called."""
    class _Names:
        address = "127.0.0.1:0"

        def ref(self, mode: str, tag: str = "v1") -> str:
            return f"{self.address}/{mode}/app:{tag}"

    return [(c[0], c[2], c[3]) for c in _cases(_Names())]  # type: ignore[arg-type]


@pytest.mark.parametrize("name,codes,words", _case_table(), ids=[c[0] for c in _case_table()])
def test_hostile_input_is_one_line(sweep: dict, name: str, codes: set, words: str) -> None:
    code, out, err, seconds, cpu, evidence, args = sweep[name]
    shown = f"imagekit {' '.join(args)} -> exit {code} in {seconds:.1f} s ({cpu:.2f} s CPU)" \
            f"\nstdout={out[-1500:]!r}\nstderr={err[-1500:]!r}"
    assert code in codes, shown
    assert "Traceback" not in out + err, shown
    if code == 2:
        lines = err.strip().splitlines()
        assert out == "", shown
        assert len(lines) == 1 and lines[0].startswith("imagekit: error: "), shown
        assert lines[0].endswith(")"), shown  # (<where>)
    assert words.lower() in (out + err).lower(), shown
    assert cpu < BOUND_S, shown
    assert seconds < BOUND_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)), shown
    assert not _passes_in(evidence), shown
    assert not _records(evidence, "running.json"), shown  # every attempt finished


def test_nothing_was_written_at_the_registry(sweep: dict, hostile: ReferrersRegistry) -> None:
    """Every promote case ended before a byte reached its destination."""
    assert hostile.writes("sink") == 0, dict(hostile.stats)
    assert not [k for k in hostile.stats if k.split(" ")[1:2] and k.split(" ")[1] in
                ("PUT", "POST", "PATCH", "DELETE")], dict(hostile.stats)


def test_a_referrer_listed_2000_times_is_read_once(sweep: dict,
                                                   hostile: ReferrersRegistry) -> None:
    assert hostile.stats[f"dup-2000 manifests {hostile.dup_referrer}"] == 1, dict(hostile.stats)


def test_promote_from_a_hostile_source_records_its_error(sweep: dict) -> None:
    """The ERROR attempt is written as it goes (was: a leftover running.json, no record)."""
    for name in ("promote-tag-manifests-numbers", "promote-referrer-layers-int"):
        evidence = sweep[name][5]
        statuses = [json.loads(p.read_text()).get("status")
                    for p in _records(evidence, "attempt.json")]
        assert "ERROR" in statuses, (name, statuses)


def test_the_sweep_can_fail(hostile: ReferrersRegistry, tmp_path: Path) -> None:
    """Good inputs pass the same checks: a key pair is made; a well-formed registry with no
    referrers is a FAIL (missing attestations, exit 1), not an error."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "ev")}
    out = tmp_path / "keys"
    made = subprocess.run([sys.executable, "-m", "imagekit", "keys", "generate", "--out-dir",
                           str(out)], env=env, capture_output=True, text=True, timeout=60,
                          cwd=REPO)
    assert made.returncode == 0, made.stderr
    assert (out / "imagekit.key").stat().st_mode & 0o777 == 0o600
    again = subprocess.run([sys.executable, "-m", "imagekit", "keys", "generate", "--out-dir",
                            str(out), "--overwrite"], env=env, capture_output=True, text=True,
                           timeout=60, cwd=REPO)
    assert again.returncode == 0, again.stderr
    done = subprocess.run([sys.executable, "-m", "imagekit", "verify-attestations", hostile.ref("ok"),
                           "--trust-key", str(out / "imagekit.pub")], env=env, capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "missing attestation" in done.stdout and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["verify-attestations", "attest"])
def test_sigterm_is_one_line(hostile: ReferrersRegistry, tmp_path: Path, command: str) -> None:
    """attest and verify stop on SIGTERM as promote does: one line, exit 130."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP256R1())
    private, public = tmp_path / "k.key", tmp_path / "k.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    argv = ["verify-attestations", hostile.ref("all-500"), "--trust-key", str(public)] if command == "verify-attestations" \
        else ["attest", hostile.ref("all-500"), "--type", "test-result", "--key", str(private)]
    (tmp_path / "ev").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "ev"),
           "IMAGEKIT_RETRY_WAIT_INITIAL": "0.2", "IMAGEKIT_RETRY_WAIT_MAX": "0.2"}
    asked = lambda: hostile.stats["all-500 GET"] + hostile.stats["all-500 HEAD"]  # noqa: E731
    before = asked()
    child = subprocess.Popen([sys.executable, "-m", "imagekit", *argv], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while asked() == before and time.monotonic() < deadline:  # it is talking to the registry
        time.sleep(0.05)
    child.send_signal(signal.SIGTERM)
    out, err = child.communicate(timeout=20)
    assert child.returncode == 130, (child.returncode, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "interrupted" in lines[0] and "Traceback" not in err, err


@pytest.mark.docker
def test_an_sbom_of_0_components_is_not_a_pass(infra, hostile: ReferrersRegistry,
                                                tmp_path: Path) -> None:
    """The hostile registry's image has no python and no dpkg: its SBOM has 0 components.
    Was: signed, attached and `sbom` PASS. Now: exit 1, the sbom attempt FAIL, nothing
    signed or attached (the image stays verifiable once real evidence exists)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = tmp_path / "k.key"
    key.write_bytes(ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    key.chmod(0o600)
    evidence = tmp_path / "ev"
    evidence.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "IMAGEKIT_EVIDENCE_DIR": str(evidence)}
    done = subprocess.run([sys.executable, "-m", "imagekit", "attest", hostile.ref("ok"),
                           "--key", str(key)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=REPO)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "0 components" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert hostile.writes("ok") == 0, dict(hostile.stats)  # nothing attached
    assert not _passes_in(evidence)
    statuses = [json.loads(p.read_text()).get("status") for p in _records(evidence,
                                                                          "attempt.json")]
    assert statuses == ["FAIL"], statuses


@pytest.mark.cluster
def test_model_volume_delete_of_nothing_says_so(infra, tmp_path: Path) -> None:
    """Was: "deleted" for objects that do not exist."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "model-volume",
                           "--delete", "--volume", "imagekit-sweep-none", "--model-claim",
                           "imagekit-sweep-none", "--namespace", "default"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deleted" not in done.stdout and done.stdout.count("not found") == 2, done.stdout
