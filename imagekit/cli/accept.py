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
from imagekit.errors import InvalidInput

if TYPE_CHECKING:  # each command imports what it uses (`imagekit --help` stays fast)
    from rich.progress import Progress

    from imagekit.results import CheckResult

SUITE_NAMES = ("functional", "media", "needle")
SUITE_SIZES = {"functional": 13, "media": 3}

BaseUrl = typer.Option(..., "--base-url", help="Server root, e.g. http://127.0.0.1:8000 (/v1 ok).")
Model = typer.Option(None, "--model", help="Model name; the first of /v1/models when omitted.")
Engine = typer.Option(None, "--engine",
                      help="vllm, sglang, transformers or generic (any OpenAI-compatible "
                           "server); read from /v1/models when omitted.")
ENGINES = ("vllm", "sglang", "transformers", "generic")
EngineVersion = typer.Option(None, "--engine-version",
                             help="Engine release (known-defect table); asked from /version "
                                  "when omitted.")
DigestOpt = typer.Option(None, "--digest", help="Image digest the server runs (evidence key).")
NameOpt = typer.Option(None, "--name", help="Evidence name when there is no digest.")
ApiKeyFile = typer.Option(None, "--api-key-file",
                          help="File holding the API key (or env IMAGEKIT_API_KEY); never argv.")
EngineConfigOpt = typer.Option(None, "--engine-config",
                               help="TOML overriding per-engine mode fields / known defects.")
Timeout = typer.Option(600.0, "--request-timeout",
                       help="Longest one request to the server may take, in seconds.")
EvidenceDir = typer.Option(None, "--evidence-dir", envvar="IMAGEKIT_EVIDENCE_DIR",
                           help="Evidence store root (default ./.evidence).")
JsonOut = typer.Option(False, "--json", help="Print one JSON document.")


def _api_key(path: Path | None) -> str | None:
    if path is not None:
        from imagekit.inputs import read_text

        key = read_text(path, "API key file", max_bytes=64 * 1024).strip()
        if not key:
            raise InvalidInput("API key file is empty", where=str(path))
        return key
    secret = settings().api_key  # $IMAGEKIT_API_KEY: a SecretStr, never printed
    return secret.get_secret_value() or None if secret is not None else None


def _digest(value: str | None) -> str | None:
    from imagekit.oci import Digest

    return str(Digest.parse(value)) if value else None


def _check_inputs(timeout: float, engine_config: Path | None) -> float:
    """Before any request: a finite positive timeout, a readable UTF-8 engine config."""
    from imagekit.inputs import positive, read_text

    if engine_config is not None:
        read_text(engine_config, "--engine-config")
    return positive(timeout, "--request-timeout", maximum=86400)


def _check_name(name: str | None) -> None:
    """Fail on a bad evidence name before any request is sent."""
    if name:
        from imagekit.evidence import EvidenceKey

        try:
            EvidenceKey.of(name)
        except InvalidInput as exc:
            raise InvalidInput(exc.message, where=exc.where or "--name") from None


def _aspect(check: CheckResult, key: str) -> str | None:
    value = check.data.get(key) if isinstance(check.data, dict) else None
    return value.get("status") if isinstance(value, dict) else None


def _print(json_output: bool, subject: str, digest: str | None, checks: list[CheckResult],
           evidence: dict[str, str], target: Any) -> None:
    from imagekit.results import overall

    if json_output:
        print_json({"subject": subject, "digest": digest, "status": overall(checks).value,
                    "checks": [{"name": c.name, "status": c.status.value, "detail": c.detail,
                                "protocol": _aspect(c, "protocol"),
                                "semantic": _aspect(c, "semantic")}
                               for c in checks],
                    "evidence": evidence,
                    "target": {"base_url": target.base_url, "model": target.model,
                               "engine": target.engine,
                               "engine_version": target.engine_version}})
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
    suite: list[str] = typer.Option(["functional"], "--suite",
                                    help="functional, media, needle or all (repeatable)."),
    model: str = Model, engine: str = Engine, engine_version: str = EngineVersion,
    digest: str | None = DigestOpt, name: str = NameOpt, api_key_file: Path = ApiKeyFile,
    engine_config: Path = EngineConfigOpt, timeout: float = Timeout,
    max_tokens: int = typer.Option(2048, "--max-tokens", min=1,
                                    help="Most tokens the server may answer each request with."),
    cases: str = typer.Option(
        "record", "--cases",
        help="Semantic cases: a shipped set (record, stand-in) or a cases FILE."),
    reproductions: int = typer.Option(None, "--reproductions", min=1,
                                      help="Identical repeats of the arithmetic case (default: "
                                           "the cases')."),
    needle_tokens: int = typer.Option(None, "--needle-tokens", min=200,
                                      help="Size of the needle document, in tokens (default: "
                                           "the cases' share of the served context)."),
    needle_wrapper: list[str] = typer.Option(
        [], "--needle-wrapper",
        help="Prompt wrappers the needle is asked under, by name in the cases (repeatable; "
             "default: all of them)."),
    needle_samples: int = typer.Option(None, "--needle-samples", min=1,
                                       help="Documents with the key per position (default: "
                                            "the cases')."),
    needle_position: list[float] = typer.Option(
        [], "--needle-position", min=0.0, max=1.0,
        help="Where in the document the key is put, 0.0 (start) to 1.0 (end) (repeatable; "
             "default: the cases')."),
    require: list[str] = typer.Option([], "--require-capability",
                                      help="A capability the server must have: image, video, "
                                           "tools or ctx=N (comma-separated or repeatable); "
                                           "an absent one is a FAIL."),
    evidence_dir: Path = EvidenceDir, json_output: bool = JsonOut,
) -> None:
    """Run acceptance suites against an OpenAI-compatible server and record evidence."""
    from imagekit.acceptance import ChatClient, SuiteOptions, load_engine_config  # noqa: PLC0415
    from imagekit.acceptance.capabilities import Requirements  # noqa: PLC0415
    from imagekit.acceptance.cases import load as load_cases  # noqa: PLC0415
    from imagekit.acceptance.runner import evidence_subject, resolve_target, run_suites  # noqa: PLC0415

    suites = list(SUITE_NAMES) if "all" in suite else list(dict.fromkeys(suite))
    for each in suites:
        if each not in SUITE_NAMES:
            raise InvalidInput(f"unknown suite {each!r}; use {', '.join(SUITE_NAMES)} or all")
    chosen, _ = load_cases(cases)
    for each in needle_wrapper:
        if each not in chosen.needle.wrappers:
            raise InvalidInput(f"unknown needle wrapper {each!r}; the {chosen.name} cases have "
                               f"{', '.join(chosen.needle.wrappers)}")
    if engine is not None and engine not in ENGINES:
        raise InvalidInput(f"unknown engine {engine!r}; use {', '.join(ENGINES)}")
    required = Requirements.parse(",".join(require))
    digest = _digest(digest)
    _check_name(name)
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

    import asyncio  # noqa: PLC0415

    subject, outcome = asyncio.run(main())
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
    matrix: Path = typer.Option(..., "--matrix", help="Load matrix TOML."),
    model: str = Model, engine: str = Engine, engine_version: str = EngineVersion,
    digest: str | None = DigestOpt, name: str = NameOpt, api_key_file: Path = ApiKeyFile,
    engine_config: Path = EngineConfigOpt, timeout: float = Timeout,
    no_calibrate: bool = typer.Option(False, "--no-calibrate",
                                      help="Assume 1 token per prompt word."),
    image: str = typer.Option(None, "--image",
                              help="Image name the digest belongs to: compare with its "
                                   "previously accepted digest (regression)."),
    evidence_dir: Path = EvidenceDir, json_output: bool = JsonOut,
) -> None:
    """Run a load matrix: count completions, errors and tokens per round against expectations;
    TTFT / ITL / end-to-end percentiles."""
    from imagekit.acceptance import ChatClient, load_engine_config, load_matrix  # noqa: PLC0415
    from imagekit.acceptance.runner import evidence_subject, resolve_target, run_matrix  # noqa: PLC0415

    if engine is not None and engine not in ENGINES:
        raise InvalidInput(f"unknown engine {engine!r}; use {', '.join(ENGINES)}")
    from imagekit.inputs import read_text  # noqa: PLC0415

    read_text(matrix, "load matrix")
    spec = load_matrix(matrix)
    digest = _digest(digest)
    _check_name(name)
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

    import asyncio  # noqa: PLC0415

    subject, outcome = asyncio.run(main())
    _print(json_output, subject, digest, outcome.checks, outcome.evidence, outcome.target)
    _exit(outcome.checks)
