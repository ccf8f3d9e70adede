"""Shared by the probes (stdlib only; they run INSIDE the image under test, read-only mounted).

Each probe prints exactly one JSON object on its last stdout line:
{"name": ..., "status": "PASS|FAIL|DEFERRED|ERROR", "detail": ..., "data": {...}}
and exits 0 whatever the verdict; a non-zero exit means the probe itself broke.
"""

import json
import subprocess
import sys

PROBE_API = 1


def emit(name, status, detail, **data):
    sys.stdout.write(json.dumps({"name": name, "status": status, "detail": detail,
                                 "data": data, "probe_api": PROBE_API}, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


def run(argv, env=None, timeout=300):
    """(exit code, stdout, stderr) of a subprocess inside the image; 127 if absent."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
    except FileNotFoundError as exc:
        return 127, "", str(exc)
    except subprocess.TimeoutExpired:
        return 124, "", f"timed out after {timeout} s"
    return done.returncode, done.stdout, done.stderr


def tail(text, lines=20):
    return "\n".join(text.strip().splitlines()[-lines:])
