"""Needle retest: 3 positions x 3 samples with the key + 1 no-answer control, once per prompt
wrapper (original retrieval template, explicit extraction of "验收密钥:" within <document>).

The two wrappers are separate checks on the same documents: the record found the original
template answering NOT_FOUND on a document where explicit extraction succeeded, which says
something about the template, not that the model lacks 32K context.
"""

from __future__ import annotations

from imagekit.acceptance.needle import make_document, NeedleDocument
from imagekit.acceptance.suite import SuiteContext, user
from imagekit.results import CheckResult, Status


def documents(ctx: SuiteContext) -> list[NeedleDocument]:
    opts = ctx.options
    docs = []
    for p_index, position in enumerate(opts.needle_positions):
        for sample in range(opts.needle_samples):
            docs.append(make_document(opts.needle_seed + 100 * p_index + sample, position,
                                      target_tokens=opts.needle_tokens))
    docs.append(make_document(opts.needle_seed + 999, 0.5, target_tokens=opts.needle_tokens,
                              with_key=False))
    return docs


async def run(ctx: SuiteContext) -> list[CheckResult]:
    docs = documents(ctx)
    checks = []
    for wrapper in ctx.options.needle_wrappers:
        rows = []
        for doc in docs:
            label = (f"needle-{wrapper}-p{doc.position:.2f}-seed{doc.seed}" if doc.has_key
                     else f"needle-{wrapper}-control-seed{doc.seed}")
            exchange = await ctx.ask(label, [user(doc.prompt(wrapper))],
                                     max_tokens=min(ctx.options.max_tokens, 1024))
            correct, why = doc.judge(exchange.answer) if exchange.ok else (
                False, exchange.summary())
            rows.append({"label": label, "position": doc.position, "seed": doc.seed,
                         "has_key": doc.has_key, "correct": correct, "why": why,
                         "answer": exchange.answer.strip()[:120],
                         "approx_tokens": doc.approx_tokens,
                         "prompt_tokens": exchange.usage.prompt_tokens if exchange.usage else None,
                         "output_tokens": exchange.usage.completion_tokens
                         if exchange.usage else None,
                         "latency_s": round(exchange.latency_s, 3), "document": doc.facts()})
        with_key = [r for r in rows if r["has_key"]]
        control = [r for r in rows if not r["has_key"]]
        good_key = sum(r["correct"] for r in with_key)
        good_control = sum(r["correct"] for r in control)
        passed = good_key == len(with_key) and good_control == len(control)
        wrong = [f"{r['label']}: {r['why']} ({r['answer'][:40]!r})" for r in rows
                 if not r["correct"]]
        detail = (f"{wrapper} wrapper: {good_key}/{len(with_key)} samples with the key at "
                  f"positions {list(ctx.options.needle_positions)}, {good_control}/"
                  f"{len(control)} no-answer control; ~{docs[0].approx_tokens} approx tokens")
        if wrong:
            detail += "; wrong: " + "; ".join(wrong)[:500]
        checks.append(CheckResult(name=f"needle-{wrapper}",
                                  status=Status.PASS if passed else Status.FAIL,
                                  detail=detail, data={"wrapper": wrapper, "samples": rows}))
    return checks
