"""Runs suites and load matrices against a server and writes every run into the evidence store:
each exchange (failed ones too) as its own JSON file, the checks, and a markdown report.

Evidence kinds: `accept-functional`, `accept-media`, `accept-needle`, `bench`; keyed by the image
digest the server runs when it is given, else by a name. Nothing here sees the API key: it lives
in the client's headers, which are never recorded.
"""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from imagekit.acceptance import corrupt, datasets, functional, needle_retest
from imagekit.acceptance.capabilities import Requirements, probe, requirement_checks
from imagekit.acceptance.client import ChatClient, public_url
from imagekit.acceptance.engines import EngineConfig, detect_engine
from imagekit.acceptance.load import (
    BodyFactory,
    Calibration,
    DatasetBodies,
    calibrate,
    judge_round,
    run_round,
    totals_check,
)
from imagekit.acceptance.matrix import Matrix
from imagekit.acceptance.media import VIDEO_ORDER, MediaUnavailable, colour_video, sized_image
from imagekit.acceptance.models import Exchange, RoundResult, RoundSpec
from imagekit.acceptance.regression import regression_check
from imagekit.acceptance.suite import SuiteContext, SuiteOptions
from imagekit.errors import InvalidInput
from imagekit.evidence import Attempt, EvidenceStore
from imagekit.evidence.kinds import AcceptResult, BenchResult, Latency
from imagekit.results import CheckResult, Status
from imagekit.standins.models import is_standin

SUITES: dict[str, Callable[[SuiteContext], Awaitable[list[CheckResult]]]] = {
    "functional": functional.run,
    "media": corrupt.run,
    "needle": needle_retest.run,
}


@dataclass
class Target:
    """The server under test, as resolved from flags and the server's own answers."""

    base_url: str
    model: str
    engine: str
    engine_version: str | None
    models: list[dict] = field(default_factory=list)
    #: a random-weight stand-in model (served from the `imagekit-standin` org, or --stand-in)
    standin: bool = False


@dataclass
class RunOutcome:
    checks: list[CheckResult]
    evidence: dict[str, str]
    target: Target
    #: the load rounds that ran, in order (a matrix run; none for the suites)
    rounds: list[RoundResult] = field(default_factory=list)


async def resolve_target(client: ChatClient, model: str | None, engine: str | None,
                         engine_version: str | None, config: EngineConfig) -> Target:
    models = await client.require_reachable()
    served = [str(m.get("id")) for m in models if m.get("id")]
    if model is not None and served and model not in served:
        raise InvalidInput(f"model {model!r} is not served here; served: {', '.join(served)}",
                           where=client.public_url)
    if model is None:
        if not models or not models[0].get("id"):
            raise InvalidInput("the server lists no model; pass --model", where=client.public_url)
        model = str(models[0]["id"])
    engine = engine or detect_engine(models)
    config.profile(engine)
    if engine_version is None:
        for path in ("/version", "/get_server_info"):
            exchange = await client.get_json(path, timeout=10.0)
            if exchange.ok and isinstance(exchange.response, dict) and \
                    exchange.response.get("version"):
                engine_version = str(exchange.response["version"])
                break
    return Target(base_url=public_url(client.base_url), model=model, engine=engine,
                  engine_version=engine_version, models=models, standin=is_standin(model))


def evidence_subject(digest: str | None, name: str | None, target: Target) -> str:
    if digest:
        return digest
    if name:
        return name
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", f"{target.engine}-{target.model}")
    return slug.strip("_.-")[:120] or "server"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:100]


def render_report(title: str, facts: dict[str, Any], checks: list[CheckResult]) -> str:
    lines = [f"# {title}", ""]
    lines += [f"- **{k}**: {v}" for k, v in facts.items()]
    lines += ["", "| check | status | protocol | semantic | detail |", "|---|---|---|---|---|"]
    for check in checks:
        detail = check.detail.replace("|", "\\|").replace("\n", " ")
        aspects = [(check.data.get(k) or {}).get("status", "-")
                   if isinstance(check.data.get(k), dict) else "-"
                   for k in ("protocol", "semantic")]
        lines.append(f"| {check.name} | {check.status.value} | {aspects[0]} | {aspects[1]} "
                     f"| {detail} |")
    for check in checks:
        samples = check.data.get("samples")
        if not samples or not isinstance(samples[0], dict) or "correct" not in samples[0]:
            continue
        lines += ["", f"## {check.name}", ""]
        if check.name.startswith("mode-"):
            lines += [f"{len(samples)} identical requests: reproductions of one problem, not "
                      "independent samples.", ""]
        keys = [k for k in ("case", "label", "expected", "answer", "correct", "output_tokens",
                            "latency_s", "note", "why") if k in samples[0]]
        lines += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        for sample in samples:
            cells = [" ".join(str(sample.get(k, "")).split()).replace("|", "\\|")[:80]
                     for k in keys]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _context(target: Target, **extra: Any) -> dict[str, Any]:
    return {"base_url": target.base_url, "model": target.model, "engine": target.engine,
            "engine_version": target.engine_version, **extra}


def _suite_context(client: ChatClient, target: Target, config: EngineConfig,
                   options: SuiteOptions, **extra: Any) -> SuiteContext:
    return SuiteContext(client=client, model=target.model, engine=target.engine,
                        engine_version=target.engine_version, config=config, options=options,
                        models=target.models, standin=target.standin, **extra)


async def run_suites(client: ChatClient, target: Target, suites: list[str], *,
                     config: EngineConfig, options: SuiteOptions, store: EvidenceStore,
                     subject: str, required: Requirements | None = None,
                     on_check: Callable[[str, CheckResult], None] | None = None,
                     model_files: dict[str, str] | None = None) -> RunOutcome:
    """Capabilities first (their own evidence, `accept-capabilities`), then each suite.
    `model_files`: sha256 by file of the model served, recorded with each suite's result."""
    checks: list[CheckResult] = []
    evidence: dict[str, str] = {}
    required = required or Requirements()
    if target.standin:
        options = _standin_options(options)
    probe_ctx = _suite_context(client, target, config, options)
    context = _context(target, suite="capabilities", standin=target.standin,
                       required=required.model_dump())
    with store.attempt(subject, "accept-capabilities", **context) as attempt:
        try:
            caps = await probe(probe_ctx, standin=target.standin)
        finally:
            _write_exchanges(attempt, probe_ctx)
        attempt.write_json("capabilities.json", caps)
        attempt.write_result(_accept_result(target, "capabilities"))
        found = [_explain(config, target, c) for c in requirement_checks(caps, required)]
        if not found:  # nothing required: the probe itself is what this attempt established
            # (an attempt without checks reads as ERROR in the report and the gate)
            attempt.add_check(CheckResult(
                name="capabilities-probed", status=Status.PASS, data=_caps_facts(caps),
                detail="capabilities probed, none required: " + ", ".join(
                    f"{k} {v}" for k, v in _caps_facts(caps).items())))
        for check in found:
            attempt.add_check(check)
        attempt.write_json("checks.json", [c.model_dump(mode="json") for c in found])
        attempt.write_text("report.md", render_report(
            "Capabilities", dict(context, **_caps_facts(caps)), found))
        checks.extend(found)
        evidence["capabilities"] = str(attempt.path)
    for suite in suites:
        ctx = _suite_context(client, target, config, options, capabilities=caps,
                             required=required)
        context = _context(target, suite=suite, options=_options_dict(options),
                           standin=target.standin, **options.cases.facts())
        with store.attempt(subject, f"accept-{suite}", **context) as attempt:
            try:
                found = await SUITES[suite](ctx)
            except Exception as exc:  # noqa: BLE001 - a broken suite is an ERROR check, kept
                attempt.write_text("error.log", "".join(traceback.format_exception(exc)))
                found = [CheckResult(name=f"{suite}-suite", status=Status.ERROR,
                                     detail=f"the suite itself broke: {type(exc).__name__}: "
                                            f"{exc}"[:300])]
            finally:
                _write_exchanges(attempt, ctx)
            attempt.write_result(_accept_result(target, suite, options, model_files))
            for check in found:
                attempt.add_check(check)
                if on_check is not None:
                    on_check(suite, check)
            attempt.write_json("checks.json", [c.model_dump(mode="json") for c in found])
            attempt.write_text("report.md", render_report(
                f"Acceptance suite {suite}", context, found))
            checks.extend(found)
            evidence[suite] = str(attempt.path)
    return RunOutcome(checks=checks, evidence=evidence, target=target)


def _accept_result(target: Target, suite: str, options: SuiteOptions | None = None,
                   model_files: dict[str, str] | None = None) -> AcceptResult:
    """The typed result of one accept attempt (the evidence contract)."""
    cases = options.cases if options is not None and suite != "capabilities" else None
    return AcceptResult(kind=f"accept-{suite}", suite=suite, base_url=target.base_url,
                        model=target.model, engine=target.engine,
                        engine_version=target.engine_version,
                        cases=cases.name if cases else None,
                        cases_calibrated_on=cases.calibrated_on if cases else None,
                        model_files=dict(model_files or {}))


#: A stand-in's answers are not judged, so it need not talk long: output capped (CPU time).
STANDIN_MAX_TOKENS = 16


def _standin_options(options: SuiteOptions) -> SuiteOptions:
    from dataclasses import replace  # noqa: PLC0415

    return replace(options, max_tokens=min(options.max_tokens, STANDIN_MAX_TOKENS))


def _caps_facts(caps: Any) -> dict[str, Any]:
    return {"image": caps.image.present, "video": caps.video.present,
            "tools": caps.tools.present, "max_model_len": caps.max_model_len,
            "tokenize": caps.tokenize_path, "stand-in model": caps.standin}


def _explain(config: EngineConfig, target: Target, check: CheckResult) -> CheckResult:
    notes = config.observed_for(target.engine, target.engine_version, check.name)
    if not notes or check.status is Status.PASS:
        return check
    text = "; ".join(f"profile {n.engine} {'/'.join(n.versions)}: {n.behaviour}" for n in notes)
    return check.model_copy(update={"detail": f"{check.detail} ({text})"})


def _options_dict(options: SuiteOptions) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(options).items()
            if k != "cases"}


def _write_exchanges(attempt: Attempt, ctx: SuiteContext) -> None:
    for n, exchange in enumerate(ctx.exchanges, 1):
        attempt.write_json(f"exchanges/{n:03d}-{_slug(exchange.label)}.json",
                           exchange.model_dump(mode="json"))


class RoundProgress(Protocol):
    def start(self, spec: RoundSpec) -> Callable[[], None]: ...
    def finish(self, spec: RoundSpec, check: CheckResult) -> None: ...


def bench_latency(results: list[RoundResult]) -> list[Latency]:
    """Each round's TTFT, TPOT, ITL and end-to-end percentiles (LatencyStats are in seconds)."""
    series = []
    for result in results:
        spec = result.spec
        label = f"round-{spec.index:02d}-{spec.modality}-c{spec.concurrency}"
        for metric in ("ttft", "tpot", "itl", "e2e"):
            stats = getattr(result, metric)
            values = {k: v for k, v in (("p50", stats.p50), ("p90", stats.p90),
                                        ("p99", stats.p99)) if v is not None}
            values.update(stats.percentiles)
            if values:
                series.append(Latency(label=label, metric=metric, unit="s",
                                      percentiles=values))
    return series


def _media_part(modality: str, matrix: Matrix) -> dict | None:
    if modality == "image":
        return sized_image(matrix.image_size).content_part()
    if modality == "video":
        return colour_video().content_part()
    return None


IMAGE_WARMUP = "What colour is the circle in the centre of this image? Answer with one word."


async def warmup(client: ChatClient, model: str, modality: str, part: dict) -> tuple[
        CheckResult, Exchange]:
    """Does the model see the load input at all? Judged on its own, never by load counts."""
    question = IMAGE_WARMUP if modality == "image" else functional.VIDEO_QUESTION
    exchange = await client.chat(f"warmup-{modality}", {
        "model": model, "max_tokens": 1024, "temperature": 0.0,
        "messages": [{"role": "user", "content": [part, {"type": "text", "text": question}]}]})
    if modality == "image":
        expected = "yellow"
        correct = functional.colour_correct(exchange.answer, expected)
    else:
        expected = ",".join(VIDEO_ORDER)
        correct = functional.colour_order(exchange.answer) == list(VIDEO_ORDER)
    ok = exchange.ok and correct
    return CheckResult(
        name=f"warmup-{modality}", status=Status.PASS if ok else Status.FAIL,
        detail=(f"{modality} load input understood ({exchange.answer.strip()[:40]!r})" if ok
                else f"{modality} warm-up answer wrong, expected {expected}: "
                     f"{exchange.summary()}; {modality} rounds left out of the formal load"),
        data={"expected": expected, "answer": exchange.answer[:200],
              "status_code": exchange.status_code}), exchange


async def run_matrix(client: ChatClient, target: Target, matrix: Matrix, *,
                     config: EngineConfig, store: EvidenceStore, subject: str,
                     matrix_text: str, progress: RoundProgress | None = None,
                     calibrate_prompts: bool = True, image: str | None = None) -> RunOutcome:
    """The matrix's rounds, then (with `image`) the regression check against the previously
    accepted digest of that image name."""
    fields = {**config.profile(target.engine).load, **matrix.request_fields}
    rounds = matrix.rounds()
    context = _context(target, matrix=matrix.name, rounds=len(rounds),
                       requests=sum(r.requests for r in rounds), image=image)
    checks: list[CheckResult] = []
    with store.attempt(subject, "bench", **context) as attempt:
        attempt.write_text("matrix.toml", matrix_text)
        calibration = (await calibrate(client, target.model, fields) if calibrate_prompts
                       else Calibration())
        attempt.write_json("calibration.json", vars(calibration))
        results: list[RoundResult] = []
        media_cache: dict[str, dict | None] = {}
        excluded: dict[str, str] = {}
        saturated_at: dict[tuple[object, ...], RoundResult] = {}
        not_run: list[str] = []
        for spec in rounds:
            past = saturated_at.get(matrix.saturation.shape_of(spec)) \
                if matrix.saturation.stop_sweep and spec.rate is not None else None
            if past is not None and past.spec.rate is not None and spec.rate is not None \
                    and spec.rate >= past.spec.rate:
                not_run.append(spec.name)
                attempt.write_json(f"rounds/{spec.index:02d}-not-run.json", {
                    "round": spec.name, "past_saturation": past.spec.name,
                    "reason": f"not run: {past.spec.name} was past saturation at "
                              f"{past.spec.rate:g} req/s ({past.saturation_reason})"})
                continue
            if spec.modality not in media_cache:
                try:
                    media_cache[spec.modality] = _media_part(spec.modality, matrix)
                except MediaUnavailable as exc:
                    excluded[spec.modality] = f"cannot make {spec.modality} input here: {exc}"
                    media_cache[spec.modality] = None
                part = media_cache[spec.modality]
                if part is not None and matrix.semantic_warmup:
                    check, exchange = await warmup(client, target.model, spec.modality, part)
                    checks.append(check)
                    attempt.write_json(f"warmup/{spec.modality}.json",
                                       exchange.model_dump(mode="json"))
                    if check.status is not Status.PASS:
                        excluded[spec.modality] = (f"left out of the formal load: the "
                                                   f"{spec.modality} warm-up failed "
                                                   f"(see warmup-{spec.modality})")
            if spec.modality in excluded:
                checks.append(CheckResult(name=spec.name, status=Status.DEFERRED,
                                          detail=excluded[spec.modality]))
                continue
            factory: BodyFactory | DatasetBodies = (
                DatasetBodies(target.model, spec, calibration, fields,
                              datasets.entries(spec.dataset)) if spec.dataset is not None else
                BodyFactory(target.model, spec, calibration, fields, media_cache[spec.modality]))
            failures: list[dict] = []
            tick = progress.start(spec) if progress is not None else None
            await client.open_connections(spec.concurrency)
            started = time.time()
            result = await run_round(client, spec, factory, tick, failures)
            check = judge_round(result, matrix.expect)
            results.append(result)
            if result.saturated and spec.rate is not None:
                saturated_at.setdefault(matrix.saturation.shape_of(spec), result)
            checks.append(check)
            if progress is not None:
                progress.finish(spec, check)
            stem = f"rounds/{spec.index:02d}"
            attempt.write_json(f"{stem}-result.json", dict(result.model_dump(mode="json"),
                                                           started_unix=started))
            attempt.write_json(f"{stem}-first-request.json", factory(0))
            if failures:
                attempt.write_json(f"{stem}-failures.json", failures)
        checks.append(totals_check(results, [c for c in checks
                                             if not c.name.startswith("warmup-")], not_run))
        if image:
            checks.append(regression_check(store, image, subject, attempt.path,
                                           matrix.regression_tolerance,
                                           matrix.regression_confidence))
        for check in checks:
            attempt.add_check(check)
        attempt.write_json("checks.json", [c.model_dump(mode="json") for c in checks])
        attempt.write_result(BenchResult(
            matrix=matrix.name, rounds=len(rounds), requests=context["requests"],
            base_url=target.base_url, model=target.model, engine=target.engine,
            engine_version=target.engine_version, latency=bench_latency(results)))
        attempt.write_text("report.md", render_report(
            f"Load matrix {matrix.name}", dict(context, calibration=calibration.note), checks))
    return RunOutcome(checks=checks, evidence={"bench": str(attempt.path)}, target=target,
                      rounds=results)
