"""`imagekit cluster probe|precheck`, `imagekit serve-command`, `imagekit launch-log parse`.

The cluster commands talk to the Kubernetes API named by --kubeconfig (default: the one
`imagekit infra up --cluster` recorded). The kubernetes client is imported only when a cluster
command runs, so the rest of the CLI works without it.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import typer

from imagekit.cli.app import app, console, guarded, print_json
from imagekit.errors import CheckFailed, InvalidInput
from imagekit.evidence import EvidenceStore
from imagekit.results import CheckReport, exit_code_for

cluster_app = typer.Typer(help="Probe images and pre-check GPU Pods on a Kubernetes cluster.",
                          no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")
launch_log_app = typer.Typer(help="Engine startup logs: phases and startupProbe budget.",
                             no_args_is_help=True)
app.add_typer(launch_log_app, name="launch-log")

KubeconfigOpt = typer.Option(None, "--kubeconfig", envvar="KUBECONFIG",
                             help="kubeconfig (default: the one imagekit infra recorded).")
EvidenceDir = typer.Option(None, "--evidence-dir", envvar="IMAGEKIT_EVIDENCE_DIR",
                           help="Evidence store root (default ./.evidence).")
JsonOpt = typer.Option(False, "--json", help="Print one JSON document.")


def _print_report(report: CheckReport, json_output: bool) -> None:
    if json_output:
        print_json(report)
    else:
        for check in report.checks:
            console.print(f"{check.status.value:8} {check.name}: {check.detail}", markup=False,
                          soft_wrap=True)
        console.print(f"{report.status.value} {report.subject}", markup=False)
        if report.evidence:
            console.print(f"evidence: {report.evidence}", markup=False)


def _finish(report: CheckReport, json_output: bool) -> None:
    _print_report(report, json_output)
    code = exit_code_for(report.checks)
    if code:
        raise typer.Exit(code)


@app.command("serve-command")
@guarded
def serve_command(
    extra: list[str] = typer.Argument(None, help="Extra engine arguments, appended as given."),
    json_output: bool = JsonOpt,
) -> None:
    """Print the engine serve command from ENGINE, MODEL_PATH, TP, MAX_CONTEXT, MAX_REQUESTS,
    DISABLE_PIECEWISE_CUDA_GRAPH, HOST, PORT (the same rules as manifests/launch.sh). With
    EXECUTE=1 it replaces itself with that command."""
    from imagekit.launch import ServeConfig, serve_argv

    config = ServeConfig.from_env(os.environ, extra_args=tuple(extra or ()))
    argv = serve_argv(config)
    if os.environ.get("EXECUTE") == "1":
        os.execvp(argv[0], argv)
    if json_output:
        print_json({"argv": argv, "config": config.model_dump(mode="json")})
    else:
        console.print(shlex.join(argv), markup=False, soft_wrap=True)


@launch_log_app.command("parse")
@guarded
def launch_log_parse(
    log: Path = typer.Argument(..., help="Engine startup log file."),
    engine: str = typer.Option("sglang", help="sglang or vllm."),
    startup_probe_seconds: int = typer.Option(
        None, help="The startupProbe budget to judge (failureThreshold × periodSeconds)."),
    subject: str = typer.Option(None, help="Evidence key (image digest or name); with it the "
                                           "raw log and the parsed phases go to evidence."),
    evidence_dir: Path = EvidenceDir,
    json_output: bool = JsonOpt,
) -> None:
    """Weight-load seconds per rank, CUDA graph capture, piecewise buckets, missing MoE tuning
    config; with --startup-probe-seconds, whether that budget covers them."""
    from imagekit.launch import parse_startup_log, required_startup_seconds, startup_budget_check
    from imagekit.launch.budget import ProbeBudget

    if engine not in ("sglang", "vllm"):
        raise InvalidInput("engine must be sglang or vllm", where=engine)
    if not log.is_file():
        raise InvalidInput("startup log not found", where=str(log))
    text = log.read_text(errors="replace")
    report = parse_startup_log(text, engine=engine)
    need = required_startup_seconds(report)
    suggested = ProbeBudget.covering(need.required_seconds)
    check = startup_budget_check(report, startup_probe_seconds) \
        if startup_probe_seconds is not None else None
    doc = {"startup": report.summary(), "required": need.model_dump(),
           "suggested_startup_probe": {**suggested.model_dump(),
                                       "total_seconds": suggested.total_seconds},
           "check": check.model_dump(mode="json") if check else None, "evidence": None}
    if subject:
        store = EvidenceStore(evidence_dir)
        with store.attempt(subject, "engine-startup", engine=engine, log=str(log)) as attempt:
            attempt.write_text("startup.log", text)
            attempt.write_json("startup.json", report)
            attempt.write_json("required.json", need)
            if check:
                attempt.add_check(check)
            else:
                from imagekit.results import CheckResult, Status
                attempt.add_check(CheckResult(name="startup_log_parsed", status=Status.PASS,
                                              detail=f"{report.lines} lines parsed"))
        doc["evidence"] = str(attempt.path)
    if json_output:
        print_json(doc)
    else:
        s = report.summary()
        console.print(f"weight load: {s['weight_load_seconds_min']}–{s['weight_load_seconds_max']}"
                      f" s over ranks {s['ranks']}", markup=False)
        console.print(f"cuda graph: {s['cuda_graph_seconds']} s, bs {s['cuda_graph_batch_sizes']}",
                      markup=False)
        console.print(f"piecewise: began={s['piecewise_began']} buckets={s['piecewise_buckets']} "
                      f"seconds={s['piecewise_seconds']}", markup=False)
        for moe in report.moe_config_missing:
            console.print(f"MoE tuning config missing (default kernel config used; performance "
                          f"hint): device={moe.device} E={moe.E} N={moe.N}", markup=False)
        console.print(f"startup needs {need.required_seconds} s"
                      f"{'' if need.complete else ' at least'}; suggested startupProbe "
                      f"periodSeconds={suggested.period_seconds} "
                      f"failureThreshold={suggested.failure_threshold}", markup=False)
        if check:
            console.print(f"{check.status.value} {check.name}: {check.detail}", markup=False)
    if check is not None and not check.status.is_pass:
        raise typer.Exit(exit_code_for([check]))
