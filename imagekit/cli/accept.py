"""`imagekit accept` (functional / corrupted-media / needle suites) and `imagekit bench` (load
matrix) against an OpenAI-compatible server. Exit 0 all passed, 1 any failed, 2 bad input or an
unreachable server."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from imagekit.cli.app import (
    app,
    console,
    err_console,
    evidence_store,
    guarded,
    print_json,
    settings,
    show_progress,
)
from imagekit.cli.surface import option
from imagekit.errors import InvalidInput

if TYPE_CHECKING:  # each command imports what it uses (`imagekit --help` stays fast)
    from rich.progress import Progress

    from imagekit.results import CheckResult

SUITE_NAMES = ("functional", "media", "needle")
SUITE_SIZES = {"functional": 13, "media": 3}

BaseUrl = option("--base-url", required=True)
Model = option("--model")
Engine = option("--engine")
ENGINES = ("vllm", "sglang", "transformers", "generic")
EngineVersion = option("--engine-version")
EvidenceKeyOpt = option("--evidence-key",
                        note="Here without one: <engine>-<model> of the server.")
ApiKeyFile = option("--api-key-file")
EngineConfigOpt = option("--engine-config")
Timeout = option("--request-timeout")
EvidenceDir = option("--evidence-dir")
JsonOut = option("--json")


def _api_key(path: Path | None) -> str | None:
    if path is not None:
        from imagekit.inputs import read_text

        key = read_text(path, "API key file", max_bytes=64 * 1024).strip()
        if not key:
            raise InvalidInput("API key file is empty", where=str(path))
        return key
    secret = settings().api_key  # $IMAGEKIT_API_KEY: a SecretStr, never printed
    return secret.get_secret_value() or None if secret is not None else None


def _check_inputs(timeout: float, engine_config: Path | None) -> float:
    """Before any request: a finite positive timeout, a readable UTF-8 engine config."""
    from imagekit.inputs import positive, read_text

    if engine_config is not None:
        read_text(engine_config, "--engine-config")
    return positive(timeout, "--request-timeout", maximum=86400)


def _aspect(check: CheckResult, key: str) -> str | None:
    value = check.data.get(key) if isinstance(check.data, dict) else None
    return value.get("status") if isinstance(value, dict) else None


def _print(json_output: bool, subject: str, digest: str | None, checks: list[CheckResult],
           evidence: dict[str, str], target: Any, rounds: list[dict] | None = None) -> None:
    from imagekit.results import overall

    if json_output:
        document = {"subject": subject, "digest": digest, "status": overall(checks).value,
                    "checks": [{"name": c.name, "status": c.status.value, "detail": c.detail,
                                "protocol": _aspect(c, "protocol"),
                                "semantic": _aspect(c, "semantic")}
                               for c in checks],
                    "evidence": evidence,
                    "target": {"base_url": target.base_url, "model": target.model,
                               "engine": target.engine,
                               "engine_version": target.engine_version}}
        if rounds is not None:
            document["rounds"] = rounds
        print_json(document)
        return
    from rich.table import Table
    from rich.text import Text

    table = Table("check", "status", "detail", show_lines=False)
    colours = {"PASS": "green", "FAIL": "red", "DEFERRED": "yellow", "ERROR": "magenta"}
    for check in checks:
        table.add_row(Text(check.name), Text(check.status.value,
                                             style=colours[check.status.value]),
                      Text(check.detail))
    console.print(table)
    console.print(f"{target.engine} {target.engine_version or ''} {target.model}: "
                  f"{overall(checks).value}", markup=False)
    for name, path in evidence.items():
        console.print(f"evidence ({name}): {path}", markup=False)


@app.command("accept")
@guarded
def accept(
    base_url: str = BaseUrl,
    suite: list[str] = option("--suite"),
    model: str = Model, engine: str = Engine, engine_version: str = EngineVersion,
    evidence_key: str | None = EvidenceKeyOpt, api_key_file: Path = ApiKeyFile,
    engine_config: Path = EngineConfigOpt, timeout: float = Timeout,
    max_tokens: int = option("--max-tokens", min=1),
    cases: str = option("--cases"),
    reproductions: int = option("--reproductions", min=1),
    needle_tokens: int = option("--needle-tokens", min=200),
    needle_wrapper: list[str] = option("--needle-wrapper"),
    needle_samples: int = option("--needle-samples", min=1),
    needle_position: list[float] = option("--needle-position", min=0.0, max=1.0),
    require: list[str] = option("--require-capability"),
    evidence_dir: Path = EvidenceDir, json_output: bool = JsonOut,
) -> None:
    """Run acceptance suites against an OpenAI-compatible server and record evidence."""
    from imagekit.acceptance import ChatClient, SuiteOptions, load_engine_config  # noqa: PLC0415
    from imagekit.acceptance.capabilities import Requirements  # noqa: PLC0415
    from imagekit.acceptance.cases import load as load_cases  # noqa: PLC0415
    from imagekit.acceptance.runner import evidence_subject, resolve_target, run_suites  # noqa: PLC0415
    from imagekit.cli.common import evidence_key_parts  # noqa: PLC0415

    suites = list(SUITE_NAMES) if "all" in suite else list(dict.fromkeys(suite))
    for each in suites:
        if each not in SUITE_NAMES:
            raise InvalidInput(f"unknown suite {each!r}; use {', '.join(SUITE_NAMES)} or all")
    chosen, _ = load_cases(cases or "record")
    for each in needle_wrapper:
        if each not in chosen.needle.wrappers:
            raise InvalidInput(f"unknown needle wrapper {each!r}; the {chosen.name} cases have "
                               f"{', '.join(chosen.needle.wrappers)}")
    if engine is not None and engine not in ENGINES:
        raise InvalidInput(f"unknown engine {engine!r}; use {', '.join(ENGINES)}")
    required = Requirements.parse(",".join(require))
    digest, name = evidence_key_parts(evidence_key)
    timeout = _check_inputs(timeout, engine_config)
    config = load_engine_config(engine_config)
    options = SuiteOptions(max_tokens=max_tokens, reproductions=reproductions,
                           needle_tokens=needle_tokens,
                           needle_wrappers=tuple(needle_wrapper) or None,
                           needle_samples=needle_samples,
                           needle_positions=tuple(needle_position) or None, cases=chosen)
    key = _api_key(api_key_file)
    store = evidence_store(evidence_dir)

    async def main() -> Any:
        async with ChatClient(base_url, api_key=key, timeout=timeout) as client:
            target = await resolve_target(client, model, engine, engine_version, config)
            subject = evidence_subject(digest, name, target)
            if not show_progress(json_output):
                return subject, await run_suites(client, target, suites, config=config,
                                                 options=options, store=store, subject=subject,
                                                 required=required)
            from rich.progress import (  # noqa: PLC0415
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=err_console, transient=True) as bar:
                tasks = {s: bar.add_task(f"accept {s}", total=SUITE_SIZES.get(
                    s, len(options.wrappers))) for s in suites}
                outcome = await run_suites(
                    client, target, suites, config=config, options=options, store=store,
                    subject=subject, required=required,
                    on_check=lambda s, _c: bar.advance(tasks[s]))
                return subject, outcome

    from imagekit.acceptance.client import run_client  # noqa: PLC0415

    subject, outcome = run_client(main())
    _print(json_output, subject, digest, outcome.checks, outcome.evidence, outcome.target)
    _exit(outcome.checks)


def _exit(checks: list[CheckResult]) -> None:
    from imagekit.results import exit_code_for  # noqa: PLC0415

    code = exit_code_for(checks)
    if code:
        raise typer.Exit(code)


class _RichRounds:
    """One progress bar per load round."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.tasks: dict[int, Any] = {}

    def start(self, spec: Any) -> Any:
        task = self.bar.add_task(spec.name, total=spec.requests)
        self.tasks[spec.index] = task
        return lambda: self.bar.advance(task)

    def finish(self, spec: Any, check: CheckResult) -> None:
        self.bar.update(self.tasks[spec.index],
                        description=f"{spec.name} {check.status.value}")


@app.command("bench")
@guarded
def bench(
    base_url: str = BaseUrl,
    matrix: Path = option("--matrix", required=True),
    model: str = Model, engine: str = Engine, engine_version: str = EngineVersion,
    evidence_key: str | None = EvidenceKeyOpt, api_key_file: Path = ApiKeyFile,
    engine_config: Path = EngineConfigOpt, timeout: float = Timeout,
    no_calibrate: bool = option("--no-calibrate"),
    image: str = option("--compare-with"),
    evidence_dir: Path = EvidenceDir, json_output: bool = JsonOut,
) -> None:
    """Run a load matrix: count completions, errors and tokens per round against expectations;
    TTFT / ITL / end-to-end percentiles."""
    from imagekit.acceptance import ChatClient, load_engine_config, load_matrix  # noqa: PLC0415
    from imagekit.acceptance.runner import evidence_subject, resolve_target, run_matrix  # noqa: PLC0415
    from imagekit.cli.common import evidence_key_parts  # noqa: PLC0415

    if engine is not None and engine not in ENGINES:
        raise InvalidInput(f"unknown engine {engine!r}; use {', '.join(ENGINES)}")
    from imagekit.inputs import read_text  # noqa: PLC0415

    read_text(matrix, "load matrix")
    spec = load_matrix(matrix)
    digest, name = evidence_key_parts(evidence_key)
    timeout = _check_inputs(timeout, engine_config)
    config = load_engine_config(engine_config)
    key = _api_key(api_key_file)
    store = evidence_store(evidence_dir)
    connections = max(r.concurrency for r in spec.rounds()) + 4

    async def main() -> Any:
        async with ChatClient(base_url, api_key=key, timeout=timeout,
                              connections=connections) as client:
            target = await resolve_target(client, model or spec.model, engine, engine_version,
                                          config)
            subject = evidence_subject(digest, name, target)
            kwargs: dict[str, Any] = dict(
                config=config, store=store, subject=subject, matrix_text=matrix.read_text(),
                calibrate_prompts=not no_calibrate, image=image)
            if not show_progress(json_output):
                return subject, await run_matrix(client, target, spec, **kwargs)
            from rich.progress import (  # noqa: PLC0415
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=err_console) as bar:
                return subject, await run_matrix(client, target, spec,
                                                 progress=_RichRounds(bar), **kwargs)

    from imagekit.acceptance.client import run_client  # noqa: PLC0415

    subject, outcome = run_client(main())
    # each load round's figures (RoundResult without per-request records), with definitions
    rounds = [dict(r.model_dump(mode="json", exclude={"records", "warmup"}), name=r.spec.name)
              for r in outcome.rounds]
    _print(json_output, subject, digest, outcome.checks, outcome.evidence, outcome.target,
           rounds)
    _exit(outcome.checks)
