"""Every command × bad input: one line `imagekit: error: … (…)` on
stderr, nothing on stdout, exit 2, under 5 s, no traceback, no PASS in evidence.

Each case runs the CLI as a user does (a process). The processes run a few at a time in one
session fixture, so the whole sweep costs well under a minute on two cores. Nothing here needs
infrastructure: every case must be refused before any registry, engine or cluster is asked — the
environment points the registry at a closed port of ours (127.0.0.1:5161), KUBECONFIG and the
infra state directory at empty places, so a check that is missing shows as a slow or different
error, never as a pass. (Hostile registries and unreachable endpoints: tests/registry.)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/
REF = "127.0.0.1:5161/imagekit/x:y"  # our port range; nothing listens there
PINNED = "127.0.0.1:5161/imagekit/x@sha256:" + "a" * 64
DIGEST_ARG = "sha256:" + "b" * 64
BOUND_S = 5.0


def _files(root: Path) -> dict[str, Path]:
    """The malformed files the cases use."""
    f: dict[str, Path] = {}

    def put(name: str, data: bytes | str) -> Path:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        f[name] = path
        return path

    put("nonutf8", b"kind: Pod\n\xff\xfe\xfa bad bytes\n")
    put("empty", b"")
    put("random", random.Random(13).randbytes(4096))
    put("notpem.pem", "this is not a certificate\n")
    put("fakepem.pem", "-----BEGIN CERTIFICATE-----\nnot base64 at all\n"
                       "-----END CERTIFICATE-----\n")
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for level in "bcdefghi":
        prev = chr(ord(level) - 1)
        bomb.append(f"{level}: &{level} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, "
                    f"*{prev}, *{prev}, *{prev}]")
    put("bomb.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: bomb}\nspec:\n"
                     "  containers: [{name: c, image: i}]\n" + "\n".join(bomb) + "\n")
    put("containers5.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
                            "  containers: 5\n")
    put("noname.yaml", "apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: c, image: i}]\n")
    put("badname.yaml", "apiVersion: v1\nkind: Pod\nmetadata: {name: UP_bad}\nspec:\n"
                        "  containers: [{name: c, image: i}]\n")
    put("notyaml.yaml", "kind: Pod\n  - : [\n")
    put("bigint.json", json.dumps({"status": "PASS"})[:-1] + ', "world_size": ' + "9" * 400 + "}")
    put("nan.json", '{"world_size": NaN}')
    put("nonutf8.toml", b"name = \"\xff\"\n")
    put("prompts.jsonl", '{"prompt": "hello"}\n')
    put("dataset-matrix.toml", 'name = "d"\n[[matrix]]\nconcurrency = [1]\noutput_tokens = [4]\n'
                               '[matrix.dataset]\npath = "prompts.jsonl"\nformat = "jsonl"\n')
    put("file-not-dir", "x")
    # spec copies: one per defect
    for name, edit in {
        "escape": lambda t: t.replace('dockerfile = "sglang/Dockerfile"',
                                      'dockerfile = "../../../../etc/passwd"'),
        "absolute": lambda t: t.replace('dockerfile = "sglang/Dockerfile"',
                                        'dockerfile = "/etc/passwd"'),
        "upper": lambda t: t.replace('repository = "imagekit/sglang"',
                                     'repository = "UPPER/Case::x"'),
        "lockescape": lambda t: t.replace('lock = "images.lock"', 'lock = "../../../etc/shadow"'),
    }.items():
        spec_dir = root / f"spec-{name}"
        shutil.copytree(ASSETS / "dockerfiles", spec_dir,
                        ignore=shutil.ignore_patterns("standins", "*.lock"))
        spec = spec_dir / "images.toml"
        spec.write_text(edit(spec.read_text()))
        f[f"spec-{name}"] = spec
    spec_dir = root / "spec-nonutf8"
    shutil.copytree(ASSETS / "dockerfiles", spec_dir, ignore=shutil.ignore_patterns("standins"))
    (spec_dir / "images.toml").write_bytes((ASSETS / "dockerfiles/images.toml").read_bytes()
                                           + b"\n# \xff\xfe\n")
    f["spec-nonutf8"] = spec_dir / "images.toml"
    lock_dir = root / "spec-badlock"
    shutil.copytree(ASSETS / "dockerfiles", lock_dir, ignore=shutil.ignore_patterns("standins"))
    (lock_dir / "images.local.lock").write_bytes(b"version = 1\n# \xff\xfe\n")
    f["spec-badlock"] = lock_dir / "images.toml"
    # a corrupt evidence store
    corrupt = root / "corrupt-evidence" / "name" / "x" / "probe" / "20260101T000000Z-abc"
    corrupt.mkdir(parents=True)
    (corrupt / "attempt.json").write_text("{ not json")
    f["corrupt-evidence"] = root / "corrupt-evidence"
    probes = root / "probes-empty"
    probes.mkdir()
    f["probes-empty"] = probes
    return f


# (id, argv builder, words the one line must hold). `F` is the dict of files above.
CASES: list[tuple[str, object, str]] = [
    # numbers
    ("probe-timeout-neg", lambda F: ["cluster", "probe", REF, "--pod-timeout", "-5"], "--pod-timeout"),
    ("probe-timeout-nan", lambda F: ["cluster", "probe", REF, "--pod-timeout", "nan"], "finite"),
    ("probe-timeout-inf", lambda F: ["cluster", "probe", REF, "--pod-timeout", "inf"], "finite"),
    ("probe-timeout-abc", lambda F: ["cluster", "probe", REF, "--pod-timeout", "abc"], "--pod-timeout"),
    ("precheck-gpus-neg", lambda F: ["cluster", "precheck", "--gpus", "-1"], "--gpus"),
    ("preflight-gpus-neg", lambda F: ["cluster", "gpu-preflight", PINNED, "--gpus", "-1"],
     "--gpus"),
    ("preflight-timeout-nan", lambda F: ["cluster", "gpu-preflight", PINNED, "--pod-timeout", "nan"],
     "--pod-timeout"),
    ("recreate-timeout-neg", lambda F: ["cluster", "recreate", str(F["containers5.yaml"]),
                                        "--pod-timeout", "-1"], "--pod-timeout"),
    ("serve-startup-neg", lambda F: ["serve-command", "--pod-image", PINNED,
                                     "--startup-seconds", "-1"], "--startup-seconds"),
    ("accept-max-tokens-0", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161",
                                       "--max-tokens", "0"], "--max-tokens"),
    ("accept-timeout-neg", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161",
                                      "--request-timeout", "-1"], "--request-timeout"),
    ("accept-timeout-nan", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161",
                                      "--request-timeout", "nan"], "finite"),
    ("accept-timeout-inf", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161",
                                      "--request-timeout", "inf"], "finite"),
    ("launch-log-budget-0", lambda F: ["launch-log", "parse", str(F["nonutf8"]),
                                       "--startup-probe-seconds", "0"],
     "--startup-probe-seconds"),
    # names
    ("serve-name", lambda F: ["serve-command", "--pod-image", PINNED, "--pod-name", "UP::bad"],
     "DNS-1123"),
    ("serve-namespace", lambda F: ["serve-command", "--pod-image", PINNED, "--namespace",
                                   "../x"], "--namespace"),
    ("probe-namespace", lambda F: ["cluster", "probe", REF, "--namespace", "../x"],
     "--namespace"),
    ("probe-selector-key", lambda F: ["cluster", "probe", REF, "--selector", "bad key=x"],
     "label key"),
    ("precheck-selector-value", lambda F: ["cluster", "precheck", "--selector",
                                           "gpu=" + "v" * 64], "label value"),
    ("preflight-selector-prefix", lambda F: ["cluster", "gpu-preflight", PINNED, "--selector",
                                             "Bad_Prefix/x=1"], "label key"),
    ("preflight-selector-noeq", lambda F: ["cluster", "gpu-preflight", PINNED, "--selector",
                                           "gpu"], "key=value"),
    ("report-out-is-dir", lambda F: ["report", DIGEST_ARG, "--out", str(F["probes-empty"])],
     "directory"),
    ("report-out-unwritable", lambda F: ["report", DIGEST_ARG, "--out",
                                         str(F["file-not-dir"] / "r.md")], "--out"),
    ("report-all-unwritable", lambda F: ["report", DIGEST_ARG, "--format", "all", "--out-dir",
                                         str(F["file-not-dir"] / "dir")], "--out-dir"),
    ("precheck-namespace", lambda F: ["cluster", "precheck", "--namespace", "UP"],
     "--namespace"),
    ("evidence-kind", lambda F: ["evidence", "list", "--kind", "../../x"], "--kind"),
    ("promote-ref", lambda F: ["promote", "UPPER/Case::x", "--to", REF], "REF:"),
    ("promote-to", lambda F: ["promote", REF, "--to", "UP::bad"], "--to"),
    ("verify-copy-ref", lambda F: ["verify-mirror", "UPPER/Case::x", REF], "OFFICIAL"),
    ("probe-ref", lambda F: ["cluster", "probe", "UPPER/Case::x"], "UPPER"),
    ("accept-name", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161", "--evidence-key",
                               "../x"], "x"),
    # files: missing, not UTF-8, empty, random bytes, too odd
    ("recreate-missing", lambda F: ["cluster", "recreate", "/nonexistent.yaml"], "not found"),
    ("recreate-nonutf8", lambda F: ["cluster", "recreate", str(F["nonutf8"])], "UTF-8"),
    ("recreate-bomb", lambda F: ["cluster", "recreate", str(F["bomb.yaml"])], "anchor"),
    ("recreate-containers5", lambda F: ["cluster", "recreate", str(F["containers5.yaml"])],
     "containers"),
    ("recreate-noname", lambda F: ["cluster", "recreate", str(F["noname.yaml"])],
     "metadata.name"),
    ("recreate-badname", lambda F: ["cluster", "recreate", str(F["badname.yaml"])],
     "metadata.name"),
    ("recreate-notyaml", lambda F: ["cluster", "recreate", str(F["notyaml.yaml"])], "YAML"),
    ("precheck-bomb", lambda F: ["cluster", "precheck", "--pod-file", str(F["bomb.yaml"])],
     "anchor"),
    ("precheck-nonutf8", lambda F: ["cluster", "precheck", "--pod-file", str(F["nonutf8"])],
     "UTF-8"),
    ("precheck-containers5", lambda F: ["cluster", "precheck", "--pod-file",
                                        str(F["containers5.yaml"])], "containers"),
    ("launch-log-empty", lambda F: ["launch-log", "parse", str(F["empty"]), "--evidence-key", "x"],
     "empty"),
    ("launch-log-random", lambda F: ["launch-log", "parse", str(F["random"]), "--evidence-key",
                                     "x"], "UTF-8"),
    ("launch-log-missing", lambda F: ["launch-log", "parse", "/nonexistent.log"], "not found"),
    ("serve-startup-log-nonutf8", lambda F: ["serve-command", "--pod-image", PINNED,
                                             "--startup-log", str(F["nonutf8"])], "UTF-8"),
    ("gpu-record-nonutf8", lambda F: ["gpu-record", str(F["nonutf8"])], "UTF-8"),
    ("gpu-record-bigint", lambda F: ["gpu-record", str(F["bigint.json"])], "digits"),
    ("gpu-record-nan", lambda F: ["gpu-record", str(F["nan.json"])], "NaN"),
    ("gpu-record-empty", lambda F: ["gpu-record", str(F["empty"])], "JSON"),
    ("accept-engine-config", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161",
                                        "--engine-config", str(F["nonutf8.toml"])], "UTF-8"),
    ("accept-api-key-nonutf8", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161",
                                          "--api-key-file", str(F["nonutf8"])], "UTF-8"),
    ("bench-matrix-nonutf8", lambda F: ["bench", "--base-url", "http://127.0.0.1:5161",
                                        "--matrix", str(F["nonutf8.toml"])], "UTF-8"),
    ("ca-file-missing", lambda F: ["promote", REF, "--to", REF, "--ca-file", "/nonexistent.pem"],
     "--ca-file"),
    ("ca-file-not-pem", lambda F: ["promote", REF, "--to", REF, "--ca-file",
                                   str(F["notpem.pem"])], "PEM"),
    ("ca-file-fake-pem", lambda F: ["verify-mirror", REF, REF, "--ca-file",
                                    str(F["fakepem.pem"])], "PEM"),
    ("probes-dir-missing", lambda F: ["cluster", "probe", REF, "--probes-dir", "/nonexistent"],
     "--probes-dir"),
    ("probes-dir-empty", lambda F: ["cluster", "probe", REF, "--probes-dir",
                                    str(F["probes-empty"])], "no probe"),
    ("preflight-script-missing", lambda F: ["cluster", "gpu-preflight", PINNED, "--script",
                                            "/nonexistent.py"], "not found"),
    # specs and locks
    ("spec-escape", lambda F: ["build", "sglang", "--spec", str(F["spec-escape"])],
     "leaves the spec's directory"),
    ("spec-absolute", lambda F: ["build", "sglang", "--spec", str(F["spec-absolute"])],
     "relative"),
    ("spec-upper", lambda F: ["build", "sglang", "--spec", str(F["spec-upper"])], "repository"),
    ("spec-lock-escape", lambda F: ["pin", "--check", "--spec", str(F["spec-lockescape"])],
     "lock"),
    ("spec-nonutf8", lambda F: ["build", "sglang", "--spec", str(F["spec-nonutf8"])], "UTF-8"),
    ("lock-nonutf8", lambda F: ["build", "sglang", "--spec", str(F["spec-badlock"]),
                                "--profile", "local"], "UTF-8"),
    ("probe-spec-escape", lambda F: ["probe", "sglang", "--spec", str(F["spec-escape"])],
     "leaves"),
    ("images-verify-upper", lambda F: ["images", "verify", "--spec", str(F["spec-upper"])],
     "repository"),
    # evidence directories and stores
    ("evidence-list-missing-dir", lambda F: ["evidence", "list", "--evidence-dir",
                                             "/nonexistent-ev"], "--evidence-dir"),
    ("evidence-list-corrupt", lambda F: ["evidence", "list", "--evidence-dir",
                                         str(F["corrupt-evidence"])], "corrupt"),
    ("promote-evidence-unwritable", lambda F: ["promote", REF, "--to", REF, "--evidence-dir",
                                               str(F["file-not-dir"] / "ev")], "--evidence-dir"),
    ("verify-copy-evidence-unwritable", lambda F: ["verify-mirror", REF, REF, "--evidence-dir",
                                                   str(F["file-not-dir"])], "--evidence-dir"),
    ("probe-evidence-unwritable", lambda F: ["cluster", "probe", REF, "--probes-dir",
                                             str(ASSETS / "probes"), "--evidence-dir",
                                             "/proc/imagekit-no/ev"], "--evidence-dir"),
    ("accept-evidence-unwritable", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161",
                                              "--evidence-dir", str(F["file-not-dir"])],
     "--evidence-dir"),
    ("launch-log-evidence-unwritable", lambda F: ["launch-log", "parse",
                                                  str(REPO / "README.md"), "--evidence-key", "x",
                                                  "--evidence-dir", str(F["file-not-dir"])],
     "--evidence-dir"),
    ("gpu-record-evidence-unwritable", lambda F: ["gpu-record", str(F["nan.json"]).replace(
        "nan.json", "bigint.json"), "--evidence-dir", str(F["file-not-dir"])], "digits"),
    ("schemas-export-onto-file", lambda F: ["schemas", "export", str(F["file-not-dir"])],
     "schemas directory"),
    # options
    ("gate-profile-bogus", lambda F: ["gate", "sha256:" + "b" * 64, "--profile", "bogus"],
     "bogus"),
    ("report-profile-bogus", lambda F: ["report", "sha256:" + "b" * 64, "--profile", "bogus"],
     "bogus"),
    ("unknown-option", lambda F: ["promote", REF, "--to", REF, "--nope"], "--nope"),
    ("missing-argument", lambda F: ["verify-mirror"], "'OFFICIAL'"),
    ("promote-no-source", lambda F: ["promote", "--to", REF], "at least one SRC"),
    ("unknown-command", lambda F: ["nosuchcommand"], "nosuchcommand"),
    ("bad-int", lambda F: ["cluster", "precheck", "--gpus", "many"], "--gpus"),
    ("preemption-policy", lambda F: ["cluster", "precheck", "--preemption-policy", "Sometimes"],
     "preemption"),
    ("toleration", lambda F: ["cluster", "probe", REF, "--toleration", "nope"], "toleration"),
    ("expect-digest", lambda F: ["cluster", "probe", REF, "--expect-digest", "sha256:12"],
     "sha256"),
    ("serve-model-claim", lambda F: ["serve-command", "--pod-image", PINNED, "--model-claim",
                                     "UP"], "--model-claim"),
    ("preflight-priority-class", lambda F: ["cluster", "gpu-preflight", PINNED,
                                            "--priority-class", "UP"], "--priority-class"),
    ("verify-copy-platform", lambda F: ["verify-mirror", REF, REF, "--platform", "nope"],
     "platform"),
    ("promote-force-no-reason", lambda F: ["promote", REF, "--to", REF, "--force"], "--reason"),
    ("cluster-accept-dataset-matrix", lambda F: ["cluster", "accept", REF, "--matrix",
                                                 str(F["dataset-matrix.toml"])], "dataset files"),
    ("accept-force-launch-blank", lambda F: ["cluster", "accept", REF, "--force-launch", " "],
     "--force-launch"),
    ("probe-engine-env", lambda F: ["probe", REF, "--engine", "sglang", "--engine-env",
                                    "NOPE=1"], "--engine-env"),
    ("report-format", lambda F: ["report", "sha256:" + "b" * 64, "--format", "bogus"],
     "imagekit report"),
    ("accept-suite", lambda F: ["accept", "--base-url", "http://127.0.0.1:5161", "--suite",
                                "bogus"], "imagekit accept"),
    ("gpu-record-digest", lambda F: ["gpu-record", str(F["bigint.json"]), "--evidence-key",
                                     "sha256:zz"], "sha256"),
    ("evidence-key", lambda F: ["evidence", "list", "sha256:zz"], "sha256"),
    ("schemas-check-onto-file", lambda F: ["schemas", "check", str(F["file-not-dir"])],
     "schemas directory"),
    ("standins-build-upper", lambda F: ["standins", "build", "--spec", str(F["spec-upper"])],
     "repository"),
    ("pin-nonutf8", lambda F: ["pin", "--spec", str(F["spec-nonutf8"])], "UTF-8"),
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple]:
    root = tmp_path_factory.mktemp("sweep")
    files = _files(root)
    empty_state = root / "state"
    empty_state.mkdir()

    def run(case: tuple[str, object, str]) -> tuple[str, tuple]:
        name, argv, _ = case
        evidence = root / "evidence" / name
        env = {**os.environ, "PYTHONPATH": str(REPO), "IMAGEKIT_EVIDENCE_DIR": str(evidence),
               "IMAGEKIT_STATE_DIR": str(empty_state), "KUBECONFIG": str(root / "no-kubeconfig"),
               "DOCKER_CONFIG": str(root / "no-docker-config"), "NO_COLOR": "1"}
        env.pop("IMAGEKIT_DEBUG", None)
        args = argv(files)  # type: ignore[operator]
        out_file, err_file = root / f"{name}.out", root / f"{name}.err"
        started = time.monotonic()
        with open(out_file, "wb") as out, open(err_file, "wb") as err:
            child = subprocess.Popen([sys.executable, "-m", "imagekit", *args], cwd=REPO,
                                     env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        killer = threading.Timer(60, child.kill)
        killer.start()
        _, status, usage = os.wait4(child.pid, 0)  # the child's own CPU time, for the bound
        killer.cancel()
        wall = time.monotonic() - started
        code = os.waitstatus_to_exitcode(status)
        return name, (code, out_file.read_text(errors="replace"),
                      err_file.read_text(errors="replace"), wall,
                      usage.ru_utime + usage.ru_stime, evidence, args)

    with ThreadPoolExecutor(max_workers=max(2, (os.cpu_count() or 2))) as pool:
        return dict(pool.map(run, CASES))


def _passes_in(evidence: Path) -> list[str]:
    found = []
    for record in evidence.rglob("attempt.json") if evidence.exists() else []:
        try:
            if json.loads(record.read_text()).get("status") == "PASS":
                found.append(str(record))
        except ValueError:
            pass
    return found


@pytest.mark.parametrize("name,words", [(c[0], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2(sweep: dict[str, tuple], name: str, words: str) -> None:
    code, out, err, seconds, cpu, evidence, args = sweep[name]
    shown = f"imagekit {' '.join(args)} -> exit {code} in {seconds:.1f} s ({cpu:.2f} s CPU)" \
            f"\nstdout={out!r}\nstderr={err!r}"
    lines = err.strip().splitlines()
    assert code == 2, shown
    assert out == "", shown
    assert len(lines) == 1 and lines[0].startswith("imagekit: error: "), shown
    assert lines[0].endswith(")"), shown  # (<where>)
    assert words.lower() in lines[0].lower(), shown
    assert "Traceback" not in err, shown
    # under 5 s: the CPU the command used, and its wall time allowing for a busy machine
    assert cpu < BOUND_S, shown
    assert seconds < BOUND_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1)), shown
    assert not _passes_in(evidence), shown


def test_the_escaping_dockerfile_is_never_read(sweep: dict[str, tuple]) -> None:
    """`../../../../etc/passwd` as dockerfile: refused, and no line of /etc/passwd printed."""
    for name in ("spec-escape", "spec-absolute", "probe-spec-escape"):
        _, out, err, *_ = sweep[name]
        assert "root:" not in out + err, (name, err)


def test_the_sweep_can_fail() -> None:
    """A good input is not refused: the sweep's checks are not true of every run."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "imagekit", "serve-command", "--pod-image",
                           PINNED, "--pod-name", "ok-name", "--namespace", "ok"], env=env,
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert "name: ok-name" in done.stdout and done.stderr == ""


@pytest.mark.docker
def test_probe_of_an_image_the_engine_lacks_is_one_line(tmp_path: Path) -> None:
    """Was: exit 2 with a table of ERRORs on stdout, nothing on stderr, one pull per probe."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "IMAGEKIT_EVIDENCE_DIR": str(tmp_path)}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "imagekit", "probe", REF, "--engine", "sglang"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2 and done.stdout == "", done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "not in the local docker engine" in lines[0], done.stderr
    assert time.monotonic() - started < 60
    assert not list(tmp_path.rglob("attempt.json"))
