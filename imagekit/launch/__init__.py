"""Engine launch: the serve command (same rules as manifests/launch.sh), the startup-log parser,
and the startupProbe budget derived from observed startup phases."""

from imagekit.launch.budget import ProbeBudget, required_startup_seconds, startup_budget_check
from imagekit.launch.command import Engine, ServeConfig, serve_argv
from imagekit.launch.startup_log import StartupReport, parse_startup_log

__all__ = [
    "Engine", "ProbeBudget", "ServeConfig", "StartupReport", "parse_startup_log",
    "required_startup_seconds", "serve_argv", "startup_budget_check",
]
