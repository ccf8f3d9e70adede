"""Engine launch: the serve command (same rules as manifests/launch.sh), the startup-log parser,
and the startupProbe budget derived from observed startup phases.

The names below are imported on first use (PEP 562): the images spec validates its serve env
against `imagekit.launch.command` alone, and every `promote` reads the spec, so it must not
compile the startup-log parser's ~25 patterns too."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from imagekit.launch.budget import (
        ProbeBudget,
        required_startup_seconds,
        startup_budget_check,
    )
    from imagekit.launch.command import Engine, ServeConfig, serve_argv
    from imagekit.launch.startup_log import StartupReport, parse_startup_log

__all__ = [
    "Engine", "ProbeBudget", "ServeConfig", "StartupReport", "parse_startup_log",
    "required_startup_seconds", "serve_argv", "startup_budget_check",
]


def __getattr__(name: str) -> Any:
    if name in ("ProbeBudget", "required_startup_seconds", "startup_budget_check"):
        from imagekit.launch import budget

        return getattr(budget, name)
    if name in ("Engine", "ServeConfig", "serve_argv"):
        from imagekit.launch import command

        return getattr(command, name)
    if name in ("StartupReport", "parse_startup_log"):
        from imagekit.launch import startup_log

        return getattr(startup_log, name)
    raise AttributeError(f"module 'imagekit.launch' has no attribute {name!r}")
