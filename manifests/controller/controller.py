#!/usr/bin/env python3
"""Unattended acceptance controller: wait until the engine is ready, then start the sub-scripts
that sit beside this file (smoke.py, …) — all delivered by one ConfigMap.

Sibling scripts are found through ``Path(__file__).absolute().parent``: the ConfigMap mount
entry (/opt/controller/smoke.py) is a symlink through ``..data`` into a versioned
``..2026_…`` directory. ``resolve()`` would pin that versioned directory; when the ConfigMap is
updated while the controller waits, the kubelet swaps ``..data`` and deletes the old directory,
and the sub-script "disappears" (the record's "No such file or directory", section 9). The
absolute path keeps going through the stable entry and always sees the current version.

A controller failure (cannot start a sub-script) is reported as phase "controller", separate
from the sub-script's own (inference) result; it never counts as a request error.

Environment:
  READY_URL        poll this URL until it answers 200 (the engine's /health)
  WAIT_FOR_CHANGE  or: wait until this mounted file's content changes (tests: ConfigMap update)
  READY_TIMEOUT    seconds to wait (default 3600)
  SUBSCRIPTS       comma-separated sibling scripts to run in order (default smoke.py)
  SCRIPT_DIR_MODE  "absolute" (default) or "resolve" (the old behaviour, kept to reproduce it)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def script_dir() -> Path:
    if os.environ.get("SCRIPT_DIR_MODE", "absolute") == "resolve":
        return Path(__file__).resolve().parent  # the bug, reproducible on purpose
    return Path(__file__).absolute().parent


#: the log-line protocol's version (imagekit/clusteraccept/protocol.py, `ResultLine`): this
#: file is stdlib-only (it also runs on a bare python image), so it writes that model's JSON
#: by hand; tests/cluster/test_accept_unit.py checks it validates there
PROTOCOL_VERSION = 1


def report(phase: str, status: str, detail: str, **data: object) -> None:
    print("IMAGEKIT-RESULT " + json.dumps({**data, "phase": phase, "status": status,
                                            "detail": detail, "v": PROTOCOL_VERSION},
                                           sort_keys=True), flush=True)


def wait_ready(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    url = os.environ.get("READY_URL")
    watched = os.environ.get("WAIT_FOR_CHANGE")
    initial = Path(watched).read_text() if watched else None
    while time.monotonic() < deadline:
        if url:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return True
            except OSError:
                pass
        elif watched:
            try:
                if Path(watched).read_text() != initial:
                    return True
            except OSError:
                pass
        else:
            return True
        time.sleep(1)
    return False


def main() -> int:
    here = script_dir()
    print(f"controller: scripts in {here} (mode {os.environ.get('SCRIPT_DIR_MODE', 'absolute')})",
          flush=True)
    timeout = float(os.environ.get("READY_TIMEOUT", "3600"))
    if not wait_ready(timeout):
        report("controller", "ERROR", f"engine not ready after {timeout:.0f}s")
        return 3
    print("controller: engine ready, starting sub-scripts", flush=True)
    for name in [s for s in os.environ.get("SUBSCRIPTS", "smoke.py").split(",") if s]:
        script = here / name
        try:
            result = subprocess.run([sys.executable, str(script)], check=False)
        except OSError as exc:
            report("controller", "ERROR", f"cannot start {name}: {exc}", script=str(script))
            return 4
        if result.returncode == 2 and not script.exists():
            report("controller", "ERROR", f"cannot start {name}: No such file or directory",
                   script=str(script))
            return 4
        if result.returncode != 0:
            report(name, "FAIL", f"{name} exited {result.returncode}")
            return 1
        report(name, "PASS", f"{name} finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
