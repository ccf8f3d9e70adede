#!/usr/bin/env python3
"""Placeholder smoke sub-script started by controller.py; prints the ConfigMap generation it
sees beside itself (through the stable mount entry), so a test can tell which version ran."""

from pathlib import Path

here = Path(__file__).absolute().parent
generation = (here / "generation").read_text().strip() if (here / "generation").exists() else "?"
print(f"SMOKE_OK generation={generation}", flush=True)
