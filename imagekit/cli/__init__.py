"""CLI entry point: imports every command module so each registers itself on the shared app."""

from __future__ import annotations

import importlib
import pkgutil

from imagekit.cli.app import app

_COMMAND_MODULES = sorted(
    m.name for m in pkgutil.iter_modules(__path__) if m.name not in {"app"}
)


def _register() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(f"imagekit.cli.{name}")


_register()


def main() -> None:
    app()


__all__ = ["app", "main"]
