"""Evidence of a parsed engine startup log (kind `engine-startup`)."""

from __future__ import annotations

from pathlib import Path

from imagekit.evidence import EvidenceStore
from imagekit.evidence.kinds import EngineStartupResult
from imagekit.launch.budget import RequiredStartup
from imagekit.launch.startup_log import StartupReport
from imagekit.results import CheckResult


def record_startup(store: EvidenceStore, subject: str, *, engine: str, log: Path, text: str,
                   report: StartupReport, need: RequiredStartup,
                   checks: list[CheckResult]) -> str:
    """One attempt with the raw log, the parsed phases and the budget it needs, and the checks
    given (budget, prefill graphs, or whether the log was parsed at all: never an invented
    PASS). Returns its directory."""
    with store.attempt(subject, "engine-startup", engine=engine, log=str(log)) as attempt:
        attempt.write_text("startup.log", text)
        attempt.write_json("startup.json", report)
        attempt.write_json("required.json", need)
        attempt.write_result(EngineStartupResult(engine=engine, log=str(log), lines=report.lines,
                                                 observed_seconds=need.observed_seconds,
                                                 required_seconds=float(need.required_seconds)))
        for each in checks:
            attempt.add_check(each)
    return str(attempt.path)
