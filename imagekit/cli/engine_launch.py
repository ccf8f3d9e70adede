"""`imagekit serve-command` and `imagekit launch-log parse`: the engine's serve command (and
its Pod) from the environment, and what an engine startup log says about its phases and the
startupProbe budget (`imagekit.launch`)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import typer

from imagekit.cli.app import (
    SUMMARIES,
    SentenceGroup,
    app,
    evidence_store,
    guarded,
    print_json,
    settings,
)
from imagekit.cli.common import EvidenceDir, JsonOpt, say
from imagekit.cli.surface import option
from imagekit.errors import InvalidInput

launch_log_app = typer.Typer(cls=SentenceGroup, help=SUMMARIES["launch-log"], no_args_is_help=True)
app.add_typer(launch_log_app, name="launch-log")


@app.command("serve-command")
@guarded
def serve_command(
    extra: list[str] = typer.Argument(None, help="Extra engine arguments, appended as given."),
    pod_image: str = option("--pod-image"),
    startup_log: Path = option("--startup-log", note="With --pod-image."),
    startup_seconds: int = option("--startup-seconds", note="With --pod-image."),
    name: str = option("--pod-name", note="With --pod-image."),
    namespace: str = option("--namespace", note="With --pod-image."),
    model_claim: str = option("--model-claim", note="With --pod-image; mounted at "
                                                    "/models/model."),
    json_output: bool = JsonOpt,
) -> None:
    """Print the engine serve command from ENGINE, MODEL_PATH, TP, MAX_CONTEXT, MAX_REQUESTS,
    DISABLE_PIECEWISE_CUDA_GRAPH, HOST, PORT (the same rules as manifests/launch.sh). With
    EXECUTE=1 it replaces itself with that command."""
    from imagekit.inputs import count, dns_label, dns_subdomain, read_text
    from imagekit.launch import ServeConfig, serve_argv

    if pod_image:  # every field of the manifest is checked before one line is printed
        if startup_seconds is not None:
            count(startup_seconds, "--startup-seconds", minimum=1, maximum=7 * 24 * 3600)
        dns_subdomain(name, "--pod-name")
        dns_label(namespace, "--namespace")
        if model_claim is not None:
            dns_subdomain(model_claim, "--model-claim")
    config = ServeConfig.from_env(os.environ, extra_args=tuple(extra or ()))
    argv = serve_argv(config)
    if pod_image:
        import yaml

        from imagekit.launch import parse_startup_log, required_startup_seconds
        from imagekit.launch.budget import ProbeBudget
        from imagekit.launch.pod import engine_pod

        seconds = startup_seconds
        if seconds is None and startup_log is not None:
            seconds = required_startup_seconds(parse_startup_log(
                read_text(startup_log, "startup log"), engine=config.engine.value)
            ).required_seconds
        if seconds is None:  # no budget given, none observed: cluster accept's default
            from imagekit.clusteraccept.run import DEFAULT_STARTUP_S

            seconds = DEFAULT_STARTUP_S
        pod, configmap = engine_pod(config, pod_image, ProbeBudget.covering(seconds),
                                    name=name, namespace=namespace, model_claim=model_claim,
                                    template_dir=settings().manifests_dir)
        if json_output:
            print_json({"configmap": configmap, "pod": pod})
        else:
            say(yaml.safe_dump_all([configmap, pod], sort_keys=False))
        return
    if os.environ.get("EXECUTE") == "1":
        os.execvp(argv[0], argv)
    if json_output:
        print_json({"argv": argv, "config": config.model_dump(mode="json")})
    else:
        say(shlex.join(argv))


@launch_log_app.command("parse")
@guarded
def launch_log_parse(
    log: Path = typer.Argument(..., help="Engine startup log file."),
    engine: str = option("--engine"),
    startup_probe_seconds: int = option("--startup-probe-seconds"),
    expect_prefill_graphs: str = option("--expect-prefill-graphs"),
    subject: str = option("--evidence-key", note="With it the raw log and the parsed phases "
                                                 "are filed in the evidence."),
    evidence_dir: Path = EvidenceDir,
    json_output: bool = JsonOpt,
) -> None:
    """Weight-load seconds per rank, CUDA graph capture, piecewise buckets, missing MoE tuning
    config; with --startup-probe-seconds, whether that budget covers them."""
    from imagekit.inputs import count, read_text
    from imagekit.launch import parse_startup_log, required_startup_seconds, startup_budget_check
    from imagekit.launch.budget import ProbeBudget
    from imagekit.launch.startup_log import engine_of_log
    from imagekit.results import exit_code_for

    if engine not in (None, "sglang", "vllm"):
        raise InvalidInput("--engine is sglang or vllm", where=engine)
    if startup_probe_seconds is not None:
        count(startup_probe_seconds, "--startup-probe-seconds", minimum=1,
              maximum=7 * 24 * 3600)
    text = read_text(log, "startup log", max_bytes=256 * 1024 * 1024)
    if not text.strip():
        raise InvalidInput("startup log is empty", where=str(log))
    if subject:
        from imagekit.cli.common import evidence_key_parts

        evidence_key_parts(subject)  # a malformed key: one line, before anything is read
    store = evidence_store(evidence_dir) if subject else None
    engine = engine or engine_of_log(text) or "unknown"
    report = parse_startup_log(text, engine=engine)
    need = required_startup_seconds(report)
    suggested = ProbeBudget.covering(need.required_seconds)
    from imagekit.launch.startup_log import parsed_check, prefill_graphs_check

    if expect_prefill_graphs not in (None, "disabled", "enabled"):
        raise InvalidInput("--expect-prefill-graphs is disabled or enabled",
                           where=expect_prefill_graphs)
    checks = []
    if startup_probe_seconds is not None:
        checks.append(startup_budget_check(report, startup_probe_seconds))
    if expect_prefill_graphs is not None:
        checks.append(prefill_graphs_check(report, expect_prefill_graphs == "disabled"))
    parsed = parsed_check(report)  # a log with no startup phase is never a PASS
    if not report.recognized:
        checks.insert(0, parsed)
    check = checks[0] if checks else None
    doc: dict[str, Any] = {"startup": report.summary(), "required": need.model_dump(),
                           "suggested_startup_probe": {**suggested.model_dump(),
                                                       "total_seconds": suggested.total_seconds},
                           "check": check.model_dump(mode="json") if check else None,
                           "checks": [c.model_dump(mode="json") for c in checks],
                           "evidence": None}
    if subject and store is not None:
        from imagekit.launch.evidence import record_startup

        doc["evidence"] = record_startup(store, subject, engine=engine, log=log, text=text,
                                         report=report, need=need, checks=checks or [parsed])
    if json_output:
        print_json(doc)
    else:
        s = report.summary()
        say(f"weight load: {s['weight_load_seconds_min']}–{s['weight_load_seconds_max']}"
                      f" s over ranks {s['ranks']}")
        say(f"cuda graph: {s['cuda_graph_seconds']} s, bs {s['cuda_graph_batch_sizes']}")
        say(f"piecewise: began={s['piecewise_began']} buckets={s['piecewise_buckets']} "
                      f"seconds={s['piecewise_seconds']}")
        for moe in report.moe_config_missing:
            say(f"MoE tuning config missing (default kernel config used; performance "
                          f"hint): device={moe.device} E={moe.E} N={moe.N}")
        say(f"startup needs {need.required_seconds} s"
                      f"{'' if need.complete else ' at least'}; suggested startupProbe "
                      f"periodSeconds={suggested.period_seconds} "
                      f"failureThreshold={suggested.failure_threshold}")
        for each in checks:
            say(f"{each.status.value} {each.name}: {each.detail}")
    if checks and exit_code_for(checks):
        raise typer.Exit(exit_code_for(checks))
