"""`imagekit doctor` without infrastructure: which checks each role gets, the verdict line, the
bound on every check, and each check FAILing on its missing part — a docker client whose
engine does not answer or hangs (a stand-in `docker` script), no buildx, a registry on a closed
port or one that never answers, a kubeconfig pointing at a closed port or a server that never
answers, a disk minimum above the free space, a file where the evidence store should be, a
signing key others can read. The same checks against the real engine, registries and cluster
(PASS, wrong credentials, missing RBAC): tests/registry/test_doctor.py and
tests/cluster/test_doctor.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagekit.doctor import (
    Access,
    DoctorInputs,
    Part,
    Role,
    local,
    parts_for,
    registries,
    run_doctor,
)
from imagekit.doctor import cluster as doctor_cluster
from imagekit.doctor.models import summary_of
from imagekit.doctor.run import _Task, bounded_options, run_checks
from imagekit.errors import InfraError
from imagekit.kube.access import Access as KubeAccess
from imagekit.kube.access import Answer
from imagekit.registry import RegistryOptions
from imagekit.results import CheckResult, Status
from imagekit.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "dockerfiles" / "images.toml"


# ------------------------------------------------------------ ports, specs, stand-ins

def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers a byte: a hung server."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


def spec_file(folder: Path, staging: str, production: str, target: str,
              base: str | None = None) -> Path:
    """A one-image spec whose registries are the given host:ports."""
    (folder / "x").mkdir(parents=True, exist_ok=True)
    (folder / "x" / "Dockerfile").write_text("FROM scratch\n")
    path = folder / "images.toml"
    path.write_text(f"""version = 1
default_profile = "t"

[images.x]
engine = "vllm"
dockerfile = "x/Dockerfile"
repository = "imagekit/x"
probes = ["pip_check"]

[images.x.base]
t = "{base or staging}/base/x:1"

[profiles.t]
lock = "t.lock"
staging = "{staging}"
production = "{production}"
target = "{target}"
""")
    return path


def fake_docker(folder: Path, *, info: str, buildx: str = "ok", hang: bool = False) -> Path:
    """A `docker` client stand-in: `info` is what `docker info` prints (`unreachable`: the
    errors docker prints without a daemon; `ok`: version 26.1.5 with its data root at
    `folder`), `buildx` ok or missing; `hang` sleeps a minute on `info` (a hung daemon)."""
    info_out = {
        "ok": json.dumps({"ServerVersion": "26.1.5", "DockerRootDir": str(folder)}),
        "unreachable": json.dumps({"ServerErrors": [
            "Cannot connect to the Docker daemon at unix:///nowhere.sock. Is the docker daemon "
            "running?"], "ClientInfo": {}}),
    }[info]
    buildx_out = 'echo "github.com/docker/buildx v0.19.3 1234"' if buildx == "ok" else \
        "echo \"docker: 'buildx' is not a docker command.\" >&2; exit 1"
    script = folder / "docker"
    script.write_text(f"""#!/bin/sh
case "$1 $2" in
  "context inspect") echo '"unix:///var/run/docker.sock"' ;;
  "info --format") {'exec sleep 60' if hang else ''}
    echo '{info_out}' ;;
  "buildx version") {buildx_out} ;;
  *) exit 1 ;;
esac
""")
    script.chmod(0o755)
    return script


def inputs(tmp_path: Path, spec: Path, **given: object) -> DoctorInputs:
    values: dict = {"spec": load_spec(spec), "profile": "t",
                    "evidence_root": tmp_path / "evidence",
                    "registry_options": RegistryOptions(docker_config=tmp_path / "no-docker"),
                    "state_dir": tmp_path / "no-state"}
    values.update(given)
    return DoctorInputs(**values)


def by_name(checks: list[CheckResult]) -> dict[str, CheckResult]:
    return {c.name: c for c in checks}


# ------------------------------------------------------------------ roles and registries

def test_each_role_gets_its_parts_and_no_role_gets_all() -> None:
    assert parts_for(Role.CI) == (Part.DOCKER, Part.BUILDX, Part.REGISTRIES, Part.DISK,
                                  Part.EVIDENCE)
    assert parts_for(Role.RELEASE) == (Part.REGISTRIES, Part.EVIDENCE, Part.KEY)
    assert parts_for(Role.OPERATOR) == (Part.CLUSTER, Part.RBAC, Part.REGISTRIES, Part.EVIDENCE)
    assert parts_for(Role.AUDITOR) == (Part.REGISTRIES, Part.EVIDENCE)
    assert set(parts_for(None)) == set(Part)


def test_registry_needs_follow_the_role_in_the_shipped_spec() -> None:
    spec = load_spec(SHIPPED)

    def needs(role: Role | None, profile: str = "local") -> dict[str, tuple[Access, tuple]]:
        return {n.registry: (n.access, n.places)
                for n in registries.registry_needs(spec, profile, role)}

    # CI reads the bases and mirrors and pushes to staging (all on 5001 locally)
    assert needs(Role.CI) == {"127.0.0.1:5001": (Access.PUSH, ("base", "mirror", "staging"))}
    assert needs(Role.RELEASE) == {"127.0.0.1:5001": (Access.PULL, ("staging",)),
                                   "127.0.0.1:5002": (Access.PUSH, ("production",)),
                                   "127.0.0.1:5003": (Access.PUSH, ("target",))}
    for reader in (Role.OPERATOR, Role.AUDITOR):
        assert {r: a for r, (a, _) in needs(reader).items()} == {
            "127.0.0.1:5001": Access.PULL, "127.0.0.1:5002": Access.PULL,
            "127.0.0.1:5003": Access.PULL}
    assert {r: a for r, (a, _) in needs(None).items()} == {
        "127.0.0.1:5001": Access.PUSH, "127.0.0.1:5002": Access.PUSH,
        "127.0.0.1:5003": Access.PUSH}
    production = needs(Role.CI, "production")
    assert production == {"docker.io": (Access.PULL, ("base",)),
                          "relay.example.internal": (Access.PUSH, ("mirror", "staging"))}
    [base] = [n for n in registries.registry_needs(spec, "production", Role.CI)
              if n.registry == "docker.io"]
    assert (base.repository, base.tag) == ("lmsysorg/sglang", "v0.5.5-cu130")
    [staging] = [n for n in registries.registry_needs(spec, "production", Role.CI)
                 if n.registry == "relay.example.internal"]
    assert staging.repository == "staging/imagekit/sglang"   # the push repository wins


# ------------------------------------------------------------------ verdict and bounds

def test_the_verdict_line_counts_what_did_not_pass() -> None:
    def c(status: Status) -> CheckResult:
        return CheckResult(name="x", status=status)

    assert summary_of([c(Status.PASS)] * 7) == "doctor: PASS (7 checks)"
    assert summary_of([c(Status.PASS)] * 5 + [c(Status.FAIL)] * 2) == \
        "doctor: FAIL (2 of 7 checks failed)"
    assert summary_of([c(Status.PASS), c(Status.FAIL), c(Status.DEFERRED)]) == \
        "doctor: FAIL (1 of 3 checks failed, 1 not judged)"
    assert summary_of([c(Status.PASS), c(Status.DEFERRED)]) == \
        "doctor: DEFERRED (1 of 2 checks not judged)"
    assert summary_of([]).startswith("doctor: ERROR")


def test_a_check_that_hangs_is_a_fail_at_the_bound_and_what_follows_it_is_deferred() -> None:
    release = threading.Event()

    def hangs(record) -> None:
        record(CheckResult(name="first", status=Status.PASS))
        release.wait(30)

    def raises(record) -> None:
        raise InfraError("no docker client installed")

    def breaks(record) -> None:
        raise KeyError("bug")

    started = time.monotonic()
    checks = run_checks([_Task(["first", "second", "third"], hangs),
                         _Task(["docker"], raises), _Task(["evidence"], breaks)], 0.5)
    took = time.monotonic() - started
    release.set()
    assert took < 2, took
    found = by_name(checks)
    assert [c.name for c in checks] == ["first", "second", "third", "docker", "evidence"]
    assert found["first"].status is Status.PASS
    assert found["second"].status is Status.FAIL
    assert found["second"].detail == "no answer within 0.5 s"
    assert found["third"].status is Status.DEFERRED
    assert "second gave no answer" in found["third"].detail
    assert found["docker"].status is Status.FAIL and "no docker client" in found["docker"].detail
    assert found["evidence"].status is Status.ERROR and "KeyError" in found["evidence"].detail


def test_bounded_registry_options_keep_trust_and_credentials() -> None:
    given = RegistryOptions(insecure=frozenset({"r:5000"}), docker_config=Path("/cfg"))
    bounded = bounded_options(given, 5.0)
    assert bounded.insecure == given.insecure and bounded.docker_config == Path("/cfg")
    assert bounded.retry.attempts == 2 and bounded.retry.deadline == 5.0
    assert bounded.retry.broken_window == 1.0 and bounded.timeout_s == 5.0


# ------------------------------------------------------------------ registries

def test_a_registry_on_a_closed_port_fails_within_seconds(tmp_path: Path) -> None:
    port = closed_port()
    need = registries.RegistryNeed(registry=f"127.0.0.1:{port}", repository="imagekit/x",
                                   access=Access.PULL, places=("staging",))
    started = time.monotonic()
    result = registries.check_registry(need, bounded_options(RegistryOptions(), 5.0), 5.0)
    assert time.monotonic() - started < 5
    assert result.status is Status.FAIL
    assert "cannot connect" in result.detail and result.detail.endswith("(staging)")
    assert not result.detail.startswith("registry ")   # the line names it already


def test_a_registry_that_never_answers_fails_at_its_bound(tmp_path: Path,
                                                          silent_port: int) -> None:
    need = registries.RegistryNeed(registry=f"127.0.0.1:{silent_port}", repository="imagekit/x",
                                   access=Access.PUSH, places=("target",))
    started = time.monotonic()
    result = registries.check_registry(need, bounded_options(RegistryOptions(), 1.0), 1.0)
    took = time.monotonic() - started
    assert result.status is Status.FAIL, result
    assert took < 4, took


# ------------------------------------------------------------------ cluster

def test_no_cluster_credentials_fail_the_operator_and_leave_rbac_not_judged() -> None:
    found: list[CheckResult] = []
    doctor_cluster.check_cluster(None, "no kubeconfig and no in-cluster ServiceAccount",
                                 "imagekit", found.append, rbac=True, required=True)
    checks = by_name(found)
    assert checks["cluster"].status is Status.FAIL
    assert "no kubeconfig" in checks["cluster"].detail
    assert checks["rbac"].status is Status.DEFERRED


def test_without_a_role_no_cluster_credentials_are_not_judged_never_passed() -> None:
    found: list[CheckResult] = []
    doctor_cluster.check_cluster(None, "no kubeconfig", "imagekit", found.append, rbac=True,
                                 required=False)
    checks = by_name(found)
    assert checks["cluster"].status is checks["rbac"].status is Status.DEFERRED
    assert checks["cluster"].detail == "not judged: no kubeconfig (--role operator requires them)"


def kubeconfig_at(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


def test_a_kubeconfig_pointing_at_a_closed_port_fails_within_seconds(tmp_path: Path) -> None:
    spec = spec_file(tmp_path / "spec", *(f"127.0.0.1:{closed_port()}" for _ in range(3)))
    started = time.monotonic()
    report = run_doctor(inputs(tmp_path, spec, role=Role.OPERATOR,
                               cluster=kubeconfig_at(tmp_path, closed_port())))
    assert time.monotonic() - started < 8
    checks = by_name(report.checks)
    assert checks["cluster"].status is Status.FAIL
    assert "cannot reach the API server" in checks["cluster"].detail
    assert checks["rbac"].status is Status.DEFERRED
    assert report.status is Status.FAIL


def test_an_api_server_that_never_answers_fails_at_the_report_bound(tmp_path: Path,
                                                                    silent_port: int) -> None:
    spec = spec_file(tmp_path / "spec", *(f"127.0.0.1:{closed_port()}" for _ in range(3)))
    started = time.monotonic()
    report = run_doctor(inputs(tmp_path, spec, role=Role.OPERATOR, check_seconds=1.5,
                               cluster=kubeconfig_at(tmp_path, silent_port)))
    assert time.monotonic() - started < 4
    checks = by_name(report.checks)
    assert checks["cluster"].status is Status.FAIL
    assert checks["cluster"].detail == "no answer within 1.5 s"
    assert checks["rbac"].status is Status.DEFERRED


def test_rbac_names_what_is_missing_and_the_command_that_grants_it() -> None:
    wanted = doctor_cluster.wanted("team-a")
    assert len(wanted) == len(set(wanted)) > 20
    assert KubeAccess(verb="create", resource="pods", namespace="team-a") in wanted
    assert KubeAccess(verb="list", resource="nodes") in wanted       # cluster-wide
    denied = {KubeAccess(verb="create", resource="pods", namespace="team-a"),
              KubeAccess(verb="list", resource="nodes")}
    answers = [Answer(access=a, allowed=a not in denied) for a in wanted]
    result = doctor_cluster.rbac_result(answers, "team-a", "system:serviceaccount:team-a:ci")
    assert result.status is Status.FAIL
    assert f"2 of {len(wanted)} permissions missing" in result.detail
    assert "create pods in namespace team-a; list nodes cluster-wide" in result.detail
    assert "imagekit cluster rbac --namespace team-a --service-account ci | kubectl apply -f -" \
        in result.detail
    assert set(result.data["commands_refused"]) == {"probe", "gpu-preflight", "accept",
                                                    "precheck", "recreate"}
    allowed = doctor_cluster.rbac_result([Answer(access=a, allowed=True) for a in wanted],
                                         "team-a", "admin")
    assert allowed.status is Status.PASS and "as admin" in allowed.detail


# ------------------------------------------------------------------ docker, disk, evidence, key

def engine_checks(tmp_path: Path, docker: Path, minimum: float = 0.001) -> dict[str, CheckResult]:
    found: list[CheckResult] = []
    local.check_engine(str(docker), None, 2.0, found.append, engine=True, buildx=True,
                       disk=[("evidence store", tmp_path / "ev", 0.001, "")],
                       min_free_gib=minimum)
    return by_name(found)


def test_an_engine_that_answers_and_has_buildx_passes(tmp_path: Path) -> None:
    checks = engine_checks(tmp_path, fake_docker(tmp_path, info="ok"))
    assert checks["docker"].status is Status.PASS
    assert "engine 26.1.5" in checks["docker"].detail
    assert checks["buildx"].status is Status.PASS and "v0.19.3" in checks["buildx"].detail
    assert checks["disk"].status is Status.PASS, checks["disk"]


def test_an_engine_that_does_not_answer_fails_and_its_disk_is_not_judged(tmp_path: Path) -> None:
    checks = engine_checks(tmp_path, fake_docker(tmp_path, info="unreachable"))
    assert checks["docker"].status is Status.FAIL
    assert "Cannot connect to the Docker daemon" in checks["docker"].detail
    assert checks["disk"].status is Status.DEFERRED
    assert "not judged: docker data root" in checks["disk"].detail


def test_a_hung_engine_fails_within_the_client_bound(tmp_path: Path) -> None:
    started = time.monotonic()
    checks = engine_checks(tmp_path, fake_docker(tmp_path, info="ok", hang=True))
    assert time.monotonic() - started < 5
    assert checks["docker"].status is Status.FAIL
    assert "no answer within 2 s" in checks["docker"].detail


def test_no_buildx_fails_buildx(tmp_path: Path) -> None:
    checks = engine_checks(tmp_path, fake_docker(tmp_path, info="ok", buildx="missing"))
    assert checks["buildx"].status is Status.FAIL
    assert "'buildx' is not a docker command" in checks["buildx"].detail
    assert checks["docker"].status is Status.PASS


def test_no_docker_client_fails_docker_and_buildx(tmp_path: Path) -> None:
    found: list[CheckResult] = []
    local.check_engine(str(tmp_path / "nothing"), None, 2.0, found.append, engine=True,
                       buildx=True, disk=None)
    checks = by_name(found)
    assert checks["docker"].status is checks["buildx"].status is Status.FAIL
    assert "IMAGEKIT_DOCKER names no executable" in checks["docker"].detail


def test_a_disk_minimum_above_the_free_space_fails(tmp_path: Path) -> None:
    checks = engine_checks(tmp_path, fake_docker(tmp_path, info="ok"), minimum=1 << 20)
    assert checks["disk"].status is Status.FAIL
    assert f"docker data root {tmp_path}" in checks["disk"].detail
    assert "needs 1.04858e+06" in checks["disk"].detail


def test_places_on_one_filesystem_need_their_minimums_together(tmp_path: Path) -> None:
    import shutil

    free = shutil.disk_usage(tmp_path).free / local.GIB
    half = free * 0.6
    alone = local.check_disk([("a", tmp_path / "a", half, "")])
    together = local.check_disk([("a", tmp_path / "a", half, ""), ("b", tmp_path / "b", half, "")])
    assert alone.status is Status.PASS
    assert together.status is Status.FAIL and "a " in together.detail and "b " in together.detail


def test_a_file_in_the_evidence_stores_place_fails(tmp_path: Path) -> None:
    occupied = tmp_path / "evidence"
    occupied.write_text("not a directory\n")
    result = local.check_evidence(occupied)
    assert result.status is Status.FAIL and "a file is in the evidence store's place" in \
        result.detail
    under_a_file = local.check_evidence(occupied / "inside")
    assert under_a_file.status is Status.FAIL and "is not a directory" in under_a_file.detail


def test_a_writable_or_creatable_evidence_store_passes(tmp_path: Path) -> None:
    assert local.check_evidence(tmp_path).status is Status.PASS
    later = local.check_evidence(tmp_path / "new" / "store")
    assert later.status is Status.PASS and f"will be created in {tmp_path}" in later.detail
    assert not (tmp_path / "new").exists()   # the check creates nothing


def test_a_signing_key_others_can_read_fails_and_a_good_one_passes(tmp_path: Path) -> None:
    from imagekit.attest.keys import generate

    private, public = generate(tmp_path / "keys")
    good = local.check_key(private)
    assert good.status is Status.PASS and "ECDSA P-256" in good.detail
    private.chmod(0o644)
    assert local.check_key(private).status is Status.FAIL
    public.chmod(0o600)
    bad = local.check_key(public)
    assert bad.status is Status.FAIL and "public key" in bad.detail
    assert local.check_key(tmp_path / "absent.key").status is Status.FAIL


# ------------------------------------------------------------------ the command

def doctor(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "imagekit", "doctor", *args],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": os.environ["PATH"], "HOME": env.pop("HOME"), **env})


@pytest.fixture
def world(tmp_path: Path) -> dict[str, str]:
    """An environment with no infrastructure: registries on closed ports, no kubeconfig, a
    stand-in docker client, an empty docker config."""
    spec = spec_file(tmp_path / "spec", *(f"127.0.0.1:{closed_port()}" for _ in range(3)))
    (tmp_path / "home").mkdir()
    return {"HOME": str(tmp_path / "home"), "IMAGEKIT_IMAGES_SPEC": str(spec),
            "IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence"),
            "IMAGEKIT_STATE_DIR": str(tmp_path / "state"),
            "IMAGEKIT_SERVICEACCOUNT_DIR": str(tmp_path / "sa"),
            "DOCKER_CONFIG": str(tmp_path / "docker-config"),
            "IMAGEKIT_DOCKER": str(fake_docker(tmp_path, info="ok"))}


def test_the_verdict_comes_first_then_one_line_per_check_and_a_fail_is_exit_1(
        world: dict[str, str]) -> None:
    done = doctor("--role", "ci", "--min-free", "0.001", env=dict(world))
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "doctor: FAIL (1 of 5 checks failed)", done.stdout
    assert [line.split()[0] for line in lines[1:]] == ["PASS", "PASS", "FAIL", "PASS", "PASS"]
    assert [line.split()[1].rstrip(":") for line in lines[1:]] == \
        ["docker", "buildx", "registry", "disk", "evidence"]
    assert "cluster" not in done.stdout and done.stderr == ""


def test_json_is_one_document_and_no_role_checks_everything(world: dict[str, str]) -> None:
    done = doctor("--json", env=dict(world))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["role"] is None and report["status"] == "FAIL"
    statuses = {c["name"].split(" ")[0]: c["status"] for c in report["checks"]}
    assert statuses["cluster"] == statuses["rbac"] == "DEFERRED"   # no cluster here
    assert "signing-key" not in statuses          # none given: not shown
    assert report["summary"].startswith("doctor: FAIL (")


def test_the_auditor_gets_only_registries_and_evidence(world: dict[str, str]) -> None:
    done = doctor("--role", "auditor", "--json", env=dict(world))
    names = [c["name"].split(" ")[0] for c in json.loads(done.stdout)["checks"]]
    assert set(names) == {"registry", "evidence"}


@pytest.mark.parametrize("args,words", [
    (["--role", "admin"], "--role must be one of ci, release, operator, auditor"),
    (["--namespace", "Bad_NS"], "--namespace must be a DNS-1123 label"),
    (["--min-free", "-1"], "--min-free must be > 0"),
    (["--spec", "/nonexistent/images.toml"], "images spec not found"),
    (["--profile", "nope"], "unknown profile 'nope'"),
])
def test_bad_input_is_one_line_and_exit_2(world: dict[str, str], args: list[str],
                                          words: str) -> None:
    done = doctor(*args, env=dict(world))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("imagekit: error: ") and words in line, line
