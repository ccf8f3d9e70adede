"""Corrupted media: an invalid PNG and an invalid MP4 must be answered as client errors (400),
then a normal request must still succeed (the process survived).

A 500 is a FAIL with the engine named. Where the engine config lists it as a known upstream
defect for this release (SGLang, record section 11), the detail says so, and it stays a FAIL:
the pass criterion is not redefined to fit the engine.
"""

from __future__ import annotations

from typing import Any

from imagekit.acceptance import media
from imagekit.acceptance.functional import check_recovery
from imagekit.acceptance.suite import SuiteContext, user
from imagekit.results import CheckResult, Status


async def _check_corrupt(ctx: SuiteContext, name: str, item: media.Media,
                         question: str, capability: str) -> CheckResult:
    """Judged only once a VALID item of the same kind was accepted (capabilities first):
    a server that refuses every image says nothing about corrupt ones."""
    caps = ctx.capabilities
    cap = getattr(caps, capability) if caps is not None else None
    if cap is not None and not cap.present:
        check = CheckResult(name=name, status=Status.DEFERRED,
                            detail=f"a valid {capability} was not accepted first, so a refusal "
                                   f"of a corrupt one means nothing: {cap.absent_reason()}",
                            data={"capability": cap.model_dump()})
        note = ctx.observed(name)
        return check.model_copy(update={"detail": f"{check.detail} ({note})"}) if note else check
    expected = ctx.profile.corrupt_media_status
    exchange = await ctx.ask(name, [user(item.content_part(), question)], max_tokens=32)
    code = exchange.status_code
    data: dict[str, Any] = {"status_code": code, "expected": expected, "engine": ctx.engine,
                            "engine_version": ctx.engine_version, "bytes": len(item.data)}
    if cap is not None:
        data["valid_first"] = f"a valid {capability} was accepted first (HTTP 200)"
    if code is not None and 400 <= code < 500:
        note = "" if code == expected else f" (expected exactly {expected})"
        return CheckResult(name=name, status=Status.PASS,
                           detail=f"{ctx.engine} answered HTTP {code} (client error){note}"
                                  + ("; a valid one was accepted first" if cap else ""),
                           data=data)
    if code is None:
        detail = f"{ctx.engine} gave no HTTP answer ({exchange.error}); expected {expected}"
    elif code == 200:
        detail = f"{ctx.engine} accepted corrupt {item.mime} with HTTP 200; expected {expected}"
    else:
        detail = (f"{ctx.engine} answered HTTP {code} for corrupt {item.mime}; expected "
                  f"{expected}" + ("; a valid one was accepted first" if cap else ""))
    note = ctx.observed(name)
    if note:
        detail += f" ({note})"
    defect = ctx.config.known_defect(ctx.engine, ctx.engine_version, name, code)
    if defect is not None:
        detail += f"; known upstream defect ({ctx.engine} {ctx.engine_version or 'any version'}" \
                  f"): {defect.note}"
        data["known_defect"] = defect.model_dump()
    return CheckResult(name=name, status=Status.FAIL, detail=detail, data=data)


async def run(ctx: SuiteContext) -> list[CheckResult]:
    checks = [
        await _check_corrupt(ctx, "corrupt-png", media.corrupt_png(),
                             "What colour is this image?", "image"),
        await _check_corrupt(ctx, "corrupt-mp4", media.corrupt_mp4(),
                             "What colours does this video show?", "video"),
    ]
    checks.append(await check_recovery(ctx, "recovery-after-corrupt-media"))
    return checks
