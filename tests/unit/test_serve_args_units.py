"""The serve_args plan and the launch gate, without an engine: the probe's input is exactly the
command imagekit launches; the rehearsal's accept command is one the spec has parsed; `cluster
accept` launches only an argv the image's own parser passed (or a forced one, with why)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import ProbeResult, ServeArgsReport
from imagekit.launch.command import (
    PREFILL_SWITCHES,
    Engine,
    ServeCommand,
    ServeConfig,
    serve_argv,
    serve_probe_input,
)
from imagekit.results import CheckResult, Status

REPO = Path(__file__).resolve().parents[2]
ASSETS = REPO   # the shipped folders: dockerfiles/, probes/, manifests/
DIGEST = "sha256:" + "ab" * 32
OLD = "--disable-piecewise-cuda-graph"


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
@pytest.mark.parametrize("switch", [None, OLD])
def test_the_probe_parses_exactly_what_would_be_launched(engine: str, switch) -> None:
    config = ServeConfig.from_env({"ENGINE": engine, "TP": "2", "SERVED_MODEL_NAME": "m"},
                                  extra_args=("--x", "1"))
    command = ServeCommand.of("c", config)
    launched = serve_argv(config.model_copy(update={"prefill_switch": switch}))
    assert command.argv(switch) == launched and launched[-2:] == ["--x", "1"]
    payload = json.loads(serve_probe_input(engine, [command]))
    assert payload["prefill_candidates"] == list(PREFILL_SWITCHES[Engine(engine)])
    [sent] = payload["commands"]
    assert sent["head"] + [switch or PREFILL_SWITCHES[Engine(engine)][0]] + sent["tail"] == \
        launched
    assert sent["expect"] == {"tp": 2, "context_length": 32768, "max_requests": 8,
                              "prefill_graph_disabled": True}


def test_the_rehearsals_accept_command_is_one_the_spec_has_serve_args_parse() -> None:
    from imagekit.clusteraccept import rehearsal
    from imagekit.clusteraccept.run import CPU_ENGINE_ARGS, AcceptOptions, serve_config
    from imagekit.probe.runner import serve_commands_of
    from imagekit.spec import load_spec

    args = rehearsal.accept_args("127.0.0.1:5003/imagekit/vllm:x", "local")
    value = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    assert value["--device"] == "cpu"
    launch = dict([value["--engine-env"].split("=", 1)])
    options = AcceptOptions(namespace="ns", served_model_name=value["--served-model-name"],
                            max_context=int(launch["MAX_CONTEXT"]),
                            engine_args=list(CPU_ENGINE_ARGS))
    spec = load_spec(ASSETS / "dockerfiles" / "images.toml")
    commands = {c.label: c for c in serve_commands_of(spec.images["vllm"], "local")}
    assert commands["rehearsal-accept"].argv(None) == serve_argv(serve_config(options))
    assert "rehearsal-accept" not in {c.label for c in
                                      serve_commands_of(spec.images["vllm"], "production")}


def test_the_probe_without_an_importable_parser_is_deferred_not_pass() -> None:
    payload = serve_probe_input("sglang", [ServeCommand.of("c", ServeConfig())])
    done = subprocess.run([sys.executable, "-S", str(ASSETS / "probes" / "serve_args.py"),
                           "sglang", payload], capture_output=True, text=True, timeout=60,
                          cwd=ASSETS / "probes")
    verdict = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0 and verdict["status"] == "DEFERRED", done.stderr
    assert "sglang's own parser cannot be imported" in verdict["detail"]
    assert "No module named 'sglang'" in verdict["detail"]


def _record(store: EvidenceStore, commands: list[dict], switch: str | None) -> None:
    check = CheckResult(name="serve_args", status=Status.PASS, detail="parsed", data={
        "engine": "vllm", "version": "0.32.0", "parser": "p", "prefill_switch": switch,
        "commands": commands})
    with store.attempt(DIGEST, "probe") as attempt:
        attempt.write_result(ProbeResult(image="x", probes=["serve_args"],
                                         serve_args=ServeArgsReport.of(check)))
        attempt.add_check(check)


def test_cluster_accept_launches_only_an_argv_the_image_parsed(tmp_path: Path) -> None:
    from imagekit.clusteraccept.run import AcceptOptions, launch_parsed, render, serve_config
    from imagekit.oci import Digest, ImageReference

    store = EvidenceStore(tmp_path)
    options = AcceptOptions(namespace="ns", engine="sglang", disable_piecewise_cuda_graph=True)
    check, switch = launch_parsed(store, Digest.parse(DIGEST), options)
    assert check.status is Status.FAIL and "no serve_args evidence" in check.detail
    assert "not submitted" in check.detail and switch is None
    forced = options.model_copy(update={"force_launch": "the GPU window closes tonight"})
    check, _ = launch_parsed(store, Digest.parse(DIGEST), forced)
    assert check.status is Status.DEFERRED and "forced: the GPU window" in check.detail
    # the image's engine took only the old spelling: the launch uses it, through PREFILL_SWITCH
    argv = serve_argv(serve_config(options, OLD))
    _record(store, [{"label": "gpu", "argv": argv, "status": "PASS", "detail": "ok"}], OLD)
    check, switch = launch_parsed(store, Digest.parse(DIGEST), options)
    assert check.status is Status.PASS and switch == OLD and check.data["argv"] == argv
    pod, _ = render(options, ImageReference.parse("r.example/x@" + DIGEST), "run", 60, [],
                    switch)
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
    assert env["PREFILL_SWITCH"] == OLD and env["DISABLE_PIECEWISE_CUDA_GRAPH"] == "1"
    # one more argument than what was parsed: never parsed, refused
    other = options.model_copy(update={"engine_args": ["--log-level", "info"]})
    check, _ = launch_parsed(store, Digest.parse(DIGEST), other)
    assert check.status is Status.FAIL and "never passed this exact command" in check.detail
    # a later probe of other commands does not hide the record that passed this one
    _record(store, [{"label": "given", "argv": ["x"], "status": "FAIL", "detail": "no"}], OLD)
    check, _ = launch_parsed(store, Digest.parse(DIGEST), options)
    assert check.status is Status.PASS
    # a FAILed parse of the same argv is no licence
    fresh = EvidenceStore(tmp_path / "fresh")
    _record(fresh, [{"label": "gpu", "argv": argv, "status": "FAIL", "detail": "no"}], OLD)
    check, _ = launch_parsed(fresh, Digest.parse(DIGEST), options)
    assert check.status is Status.FAIL and "gpu FAIL" in check.detail


def test_a_serve_setting_names_only_launch_variables() -> None:
    from pydantic import ValidationError

    from imagekit.spec.models import ImageSpec

    base = {"engine": "sglang", "dockerfile": "d", "repository": "r", "probes": ["serve_args"],
            "base": {"local": "127.0.0.1:5001/b:t"}}
    with pytest.raises(ValidationError, match="not launch.sh variable"):
        ImageSpec.model_validate({**base, "serve": {"x": {"env": {"TPP": "2"}}}})
    with pytest.raises(ValidationError, match="TP must be|bad serve setting tp"):
        ImageSpec.model_validate({**base, "serve": {"x": {"env": {"TP": "0"}}}})
    ok = ImageSpec.model_validate({**base, "serve": {"x": {"env": {"TP": "2"}, "args": ["-v"]}}})
    assert ok.serve["x"].config("sglang").tp == 2


def test_a_launch_parsed_on_ci_counts_on_the_operators_machine_from_the_signed_statement(
        tmp_path: Path) -> None:
    """CI's signed test-result carries what the image's parser passed (serveArgs): an operator
    store that holds only that trusted statement (kind attested) launches the same argv; a
    statement without it is no licence."""
    from imagekit.attest import keys
    from imagekit.attest.dsse import bundle_of, sign_envelope
    from imagekit.attest.pull import file_attested
    from imagekit.attest.run import test_result_for
    from imagekit.attest.verify import verify_trusted
    from imagekit.clusteraccept.run import AcceptOptions, launch_parsed, serve_config
    from imagekit.oci import Digest
    from imagekit.trust import load_trust, signed_time

    digest = Digest.parse(DIGEST)
    private, public = keys.generate(tmp_path / "ci")
    named = tmp_path / "ci.pub"
    named.write_bytes(public.read_bytes())
    trust = load_trust([named], env={})
    options = AcceptOptions(namespace="ns", engine="sglang", disable_piecewise_cuda_graph=True)
    argv = serve_argv(serve_config(options, OLD))

    def operator_with(statement: dict, name: str) -> EvidenceStore:
        key = keys.load_private(private)
        found, signer = verify_trusted(bundle_of(sign_envelope(statement, key), key), trust)
        store = EvidenceStore(tmp_path / name)
        file_attested(store, digest, {
            "type": found["predicateType"], "referrer": "sha256:" + "1" * 64,
            "bundle": "sha256:" + "e" * 64, "statement": found, "signer": signer.name,
            "fingerprint": signer.fingerprint, "label": signer.label,
            "signed_at": signed_time(found)}, "127.0.0.1:5001", "imagekit/x")
        return store

    ci = EvidenceStore(tmp_path / "ci-store")
    _record(ci, [{"label": "gpu", "argv": argv, "status": "PASS", "detail": "ok"}], OLD)
    statement = test_result_for(ci, digest, "127.0.0.1:5001/imagekit/x")
    assert [r["prefill_switch"] for r in statement["predicate"]["serveArgs"]] == [OLD]
    check, switch = launch_parsed(operator_with(statement, "operator"), digest, options)
    assert check.status is Status.PASS and switch == OLD, check.detail
    assert "signed by ci" in check.data["evidence"]
    bare = dict(statement, predicate=dict(statement["predicate"], serveArgs=[]))
    check, _ = launch_parsed(operator_with(bare, "operator-bare"), digest, options)
    assert check.status is Status.FAIL and "no serve_args evidence" in check.detail


def test_a_launch_command_nobody_could_judge_is_not_submitted_unless_forced() -> None:
    """The parse of a new launch command could not run (a stuck pull, a parser that cannot be
    imported): DEFERRED, and the run stops before submission like a FAIL; only a forced one
    (its reason in the check) goes ahead. A PASS goes ahead; a FAIL never does."""
    from imagekit.clusteraccept.run import Plan

    budget = CheckResult(name="startup_budget", status=Status.PASS)

    def plan(parsed: CheckResult) -> Plan:
        return Plan(parsed=parsed, prefill_switch=None, budget=900, budget_source="default",
                    budget_check=budget, engine_pod={}, result={})

    unjudged = CheckResult(name="launch_parsed", status=Status.DEFERRED, detail="stuck")
    assert plan(unjudged).refused is unjudged
    forced = unjudged.model_copy(update={"data": {"forced": "the window closes"}})
    assert plan(forced).refused is None
    assert plan(CheckResult(name="launch_parsed", status=Status.PASS)).refused is None
    failed = CheckResult(name="launch_parsed", status=Status.FAIL)
    assert plan(failed).refused is failed
