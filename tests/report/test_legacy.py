"""The previous evidence layout stays readable: a report from the committed store made by the
code before the layout changed equals, in content, one from the same runs written by today's
producers."""

from __future__ import annotations

import re

from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import GateDecision, GateOverrideResult
from imagekit.report import build_report, render
from tests.report.legacy.inputs import COPY_DIGEST, DIGEST, STORE
from tests.report.legacy.runs import write_runs

_PLACES = re.compile(r"(sha256|name)/[0-9a-z._-]+/[a-z-]+/\d{8}T\d{6}\.\d+Z-[0-9a-f]{6}")


def _content(report) -> dict:
    """The report without where and when its evidence lies (attempt ids, paths, times)."""
    data = report.model_dump(mode="json", exclude={"generated", "evidence_root"})
    for section in ("checks", "history"):
        for line in data[section]:
            for field in ("key", "attempt_id", "finished", "evidence"):
                line.pop(field)
    for section in ("endpoints", "preflight", "latency", "overrides"):
        for item in data[section]:
            for field in ("evidence", "attempt_id", "finished"):
                item.pop(field, None)
    data["facts"].pop("source")
    return data


_TIMES = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?")


def _normalised(text: str) -> str:
    return _TIMES.sub("<time>", _PLACES.sub("<attempt>", text))


def test_report_from_the_old_store_equals_one_from_todays_producers(tmp_path) -> None:
    old = EvidenceStore(STORE)
    assert all(r.layout == 1 for key in old.keys()  # noqa: SIM118 - a method, not a dict
               for r in old.attempts(key.removeprefix("name:")))
    [override] = [old.result(r) for r in old.attempts(DIGEST, "gate-override")]
    assert isinstance(override, GateOverrideResult)
    fresh = EvidenceStore(tmp_path / "fresh")
    write_runs(fresh, override=GateDecision(digest=str(DIGEST), allowed=False,
                                            reasons=override.refused_for,
                                            required=override.required))
    assert all(r.layout == 2 for key in fresh.keys()  # noqa: SIM118 - a method, not a dict
               for r in fresh.attempts(key.removeprefix("name:")))
    before, after = build_report(old, DIGEST, profile="local"), \
        build_report(fresh, DIGEST, profile="local")
    # the one thing the old records cannot know: the referrers each hop carried (typed since
    # HopEvidence.referrers); the old report says "not recorded", today's says how many
    copied = [e for e in after.endpoints if e.bytes_moved is not None]
    assert copied and all(e.referrers == 0 for e in copied)
    assert all(e.referrers is None for e in before.endpoints)
    before = before.model_copy(update={"endpoints": [
        e.model_copy(update={"referrers": a.referrers})
        for e, a in zip(before.endpoints, after.endpoints, strict=True)]})
    assert _normalised(str(_content(before))) == _normalised(str(_content(after)))
    # and what the old layout got wrong is right in both: the copy's comparison is the copy's
    # (the kind recorded as `verify-copy` is named by the command's current name)
    assert not any(line.kind == "verify-mirror" for line in before.checks)
    assert not any(line.kind == "verify-mirror" for line in after.checks)
    for store in (old, fresh):
        copy = build_report(store, COPY_DIGEST)
        assert {line.name for line in copy.checks if line.kind == "verify-mirror"} >= \
            {"layer-content"}
        assert not any(line.kind == "verify-copy" for line in copy.checks)
        assert not copy.gate.allowed
    # the markdown a person reads is the same too (but where and when)
    assert _normalised(render(before, "md").replace(str(old.root), "")) == \
        _normalised(render(after, "md").replace(str(fresh.root), ""))
