"""Needle retest: 3 positions x 3 samples with the key + 1 no-answer control, once per prompt
wrapper (original retrieval template, explicit extraction of "验收密钥:" within <document>).

The two wrappers are separate checks on the same documents: the record found the original
template answering NOT_FOUND on a document where explicit extraction succeeded, which says
something about the template, not that the model lacks 32K context.

Sizing: the document must fit the server's context (`max_model_len`) with the answer budget and
a stated margin. Where the engine has a tokenize endpoint (vLLM `/tokenize`) every prompt is
counted by the REAL tokenizer and the document shrunk until it fits; otherwise the estimate
(`approx_tokens`) gets a margin and a context-overflow answer shrinks the document and retries.
An overflow that remains is an ERROR of the harness with the engine's own message, never a
retrieval failure ("0/9 samples" was the record's misreading).

The cases file says how large the document is (a share of the served context, bounded), its
wrappers, positions and samples, and the smallest document that still means anything: a served
context too short for it is named a context limit (DEFERRED), not scored as a miss.
"""

from __future__ import annotations

import re
from typing import Any

from imagekit.acceptance.models import Exchange
from imagekit.acceptance.needle import NeedleDocument, make_document
from imagekit.acceptance.protocol import (
    Verdict,
    combine,
    failed,
    passed,
    response_problems,
    server_words,
)
from imagekit.acceptance.suite import SuiteContext, user
from imagekit.results import CheckResult, Status

#: tokens kept free besides the answer budget: 2 % of the context, at least 64
MARGIN_SHARE, MARGIN_MIN = 0.02, 64
#: without a tokenizer the estimate is trusted only this far
ESTIMATE_SHARE = 0.85
SIZING_ROUNDS = 6
OVERFLOW_RETRIES = 3
_OVERFLOW = re.compile(r"maximum context length|context length|too long|exceeds? the "
                       r"(?:model|max)", re.I)


def is_overflow(exchange: Exchange) -> bool:
    return exchange.status_code == 400 and bool(_OVERFLOW.search(server_words(exchange, 400)))


def _answer_budget(ctx: SuiteContext) -> int:
    return min(ctx.options.max_tokens, ctx.options.cases.needle.answer_tokens)


def _fit(ctx: SuiteContext) -> tuple[int | None, int]:
    """(most prompt tokens allowed, margin) for this server, None when its context is unknown."""
    max_len = ctx.capabilities.max_model_len if ctx.capabilities else None
    if not max_len:
        return None, 0
    margin = max(MARGIN_MIN, round(max_len * MARGIN_SHARE))
    return max_len - _answer_budget(ctx) - margin, margin


async def _sized(ctx: SuiteContext, seed: int, position: float, with_key: bool,
                 fit: int | None) -> tuple[NeedleDocument, dict]:
    """The document for (seed, position), shrunk until the longest wrapper's prompt fits."""
    case = ctx.options.cases.needle
    target = ctx.options.needle_tokens or (
        round(fit * case.size) if fit is not None else case.max_tokens or 31_000)
    if ctx.options.needle_tokens is None and case.max_tokens is not None:
        target = min(target, case.max_tokens)
    if fit is not None:
        target = min(target, fit)
    tokenize = ctx.capabilities is not None and ctx.capabilities.tokenize_path is not None
    if not tokenize and fit is not None:
        target = min(target, round(fit * ESTIMATE_SHARE))
    sizing: dict[str, Any] = {"method": "tokenizer" if tokenize else "estimate", "fit": fit,
                              "rounds": []}
    for _ in range(SIZING_ROUNDS):
        doc = _document(ctx, seed, position, target, with_key)
        if not tokenize or fit is None:
            break
        counts: list[int | None] = []
        for wrapper in ctx.options.wrappers.values():
            counted = await ctx.client.tokenize(ctx.model, [user(doc.prompt(wrapper))])
            counts.append(counted["count"] if counted else None)
        known = [c for c in counts if c is not None]
        if len(known) < len(counts):
            sizing["method"] = "estimate (tokenize failed)"
            break
        longest = max(known)
        sizing["rounds"].append({"target": target, "tokens": longest})
        if longest <= fit:
            sizing["tokens"] = longest
            break
        target = max(200, int(target * fit / longest * 0.99))
    return doc, sizing


def _document(ctx: SuiteContext, seed: int, position: float, target: int,
              with_key: bool) -> NeedleDocument:
    case = ctx.options.cases.needle
    return make_document(seed, position, target_tokens=target, with_key=with_key,
                         filler=case.filler, distractors=case.distractors,
                         not_found=case.not_found)


def context_limit(ctx: SuiteContext, wrapper: str, fit: int | None) -> CheckResult:
    """The served context leaves less room than the smallest document the cases allow: the
    deployment's limit, named as such; nothing was asked, nothing is scored as a miss."""
    case = ctx.options.cases.needle
    max_len = ctx.capabilities.max_model_len if ctx.capabilities else None
    return CheckResult(
        name=f"needle-{wrapper}", status=Status.DEFERRED,
        detail=f"context limit: the served context ({max_len} tokens) leaves {fit} tokens for "
               f"the document, below the {case.min_tokens} the {ctx.options.cases.name} cases "
               "need; not scored as a miss",
        data={"wrapper": wrapper, "context_limit": {"max_model_len": max_len, "fit": fit,
                                                    "min_tokens": case.min_tokens},
              "protocol": None, "semantic": {"status": "DEFERRED", "detail": "context limit"}})


async def run(ctx: SuiteContext) -> list[CheckResult]:
    opts = ctx.options
    fit, margin = _fit(ctx)
    if fit is not None and fit < opts.cases.needle.min_tokens:
        return [context_limit(ctx, wrapper, fit) for wrapper in opts.wrappers]
    docs: list[tuple[NeedleDocument, dict]] = []
    for p_index, position in enumerate(opts.positions):
        for sample in range(opts.samples):
            docs.append(await _sized(ctx, opts.seed_base + 100 * p_index + sample, position,
                                     True, fit))
    if opts.cases.needle.control:
        docs.append(await _sized(ctx, opts.seed_base + 999, 0.5, False, fit))
    checks = []
    for wrapper, template in opts.wrappers.items():
        rows, exchanges, overflow = [], [], []
        for doc, sizing in docs:
            label = (f"needle-{wrapper}-p{doc.position:.2f}-seed{doc.seed}" if doc.has_key
                     else f"needle-{wrapper}-control-seed{doc.seed}")
            exchange = await ctx.ask(label, [user(doc.prompt(template))],
                                     max_tokens=_answer_budget(ctx))
            retries = 0
            while is_overflow(exchange) and sizing["method"] != "tokenizer" and \
                    retries < OVERFLOW_RETRIES:
                retries += 1
                doc = _document(ctx, doc.seed, doc.position, int(doc.approx_tokens * 0.8),
                                doc.has_key)
                exchange = await ctx.ask(f"{label}-shrunk{retries}",
                                         [user(doc.prompt(template))],
                                         max_tokens=_answer_budget(ctx))
            exchanges.append(exchange)
            if is_overflow(exchange):
                overflow.append(f"{label}: {server_words(exchange)}")
            correct, why = doc.judge(exchange.answer) if exchange.ok else (
                False, exchange.summary())
            rows.append({"label": label, "position": doc.position, "seed": doc.seed,
                         "has_key": doc.has_key, "correct": correct, "why": why,
                         "answer": exchange.answer.strip()[:120],
                         "approx_tokens": doc.approx_tokens, "sizing": sizing,
                         "shrink_retries": retries,
                         "prompt_tokens": exchange.usage.prompt_tokens if exchange.usage else None,
                         "output_tokens": exchange.usage.completion_tokens
                         if exchange.usage else None,
                         "latency_s": round(exchange.latency_s, 3), "document": doc.facts()})
        checks.append(_judge(ctx, wrapper, rows, exchanges, overflow, fit, margin))
    return checks


def _judge(ctx: SuiteContext, wrapper: str, rows: list[dict], exchanges: list[Exchange],
           overflow: list[str], fit: int | None, margin: int) -> CheckResult:
    prompt_tokens = [r["prompt_tokens"] for r in rows if r["prompt_tokens"] is not None]
    size = (f"prompts {min(prompt_tokens)}-{max(prompt_tokens)} tokens (server usage)"
            if prompt_tokens else f"~{rows[0]['approx_tokens']} approx tokens")
    room = (f"; fit {fit} tokens = max_model_len - answer {_answer_budget(ctx)} - margin "
            f"{margin}, sized by {rows[0]['sizing']['method']}" if fit is not None else
            "; context length unknown")
    data = {"wrapper": wrapper, "samples": rows, "fit": fit, "margin": margin}
    if overflow:
        return CheckResult(
            name=f"needle-{wrapper}", status=Status.ERROR,
            detail=f"harness error, not a retrieval failure: context limit: the document "
                   f"did not fit the context: {'; '.join(overflow)[:400]}{room}",
            data=dict(data, protocol={"status": "ERROR", "detail": "context overflow"},
                      semantic=None))
    problems = [f"{e.label}: {p}" for e in exchanges for p in response_problems(e)]
    protocol = failed("; ".join(problems)[:400]) if problems else passed(
        f"{len(exchanges)} requests answered 200 within the context; {size}{room}")

    def judge() -> Verdict:
        with_key = [r for r in rows if r["has_key"]]
        control = [r for r in rows if not r["has_key"]]
        good_key = sum(r["correct"] for r in with_key)
        good_control = sum(r["correct"] for r in control)
        detail = (f"{wrapper} wrapper: {good_key}/{len(with_key)} samples with the key at "
                  f"positions {list(ctx.options.positions)}, " + (
                      f"{good_control}/{len(control)} no-answer control" if control else
                      f"no no-answer control in the {ctx.options.cases.name} cases"))
        wrong = [f"{r['label']}: {r['why']} ({r['answer'][:40]!r})" for r in rows
                 if not r["correct"]]
        if wrong:
            detail += "; wrong: " + "; ".join(wrong)[:500]
        else:
            detail += "; answered " + ", ".join(repr(r["answer"][:40]) for r in rows)[:300]
        ok = good_key == len(with_key) and good_control == len(control)
        return Verdict(Status.PASS if ok else Status.FAIL, detail)

    return combine(f"needle-{wrapper}", protocol, ctx.semantic(judge), data)
