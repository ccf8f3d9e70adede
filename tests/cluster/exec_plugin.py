#!/usr/bin/env python3
"""A tiny exec credential plugin for the tests (what `aws eks get-token` is to EKS).

Usage (from a kubeconfig's users[].user.exec): exec_plugin.py STATE_DIR [--ttl S]
[--fail-after N] [--mode ok|exit1|nonjson|wrong-version|cert]

Each run appends one line to STATE_DIR/runs (the tests count them) with the
KUBERNETES_EXEC_INFO it was given, and prints an ExecCredential whose token lives --ttl
seconds: `ik.<expiry ms>.<run>.<hmac>` signed with STATE_DIR/key, which the test's API front
checks. From run N+1 on (--fail-after N) it fails like a plugin whose login expired.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import hmac
import json
import os
import sys
import time
from pathlib import Path


def sign(key: bytes, payload: str) -> str:
    return hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()[:32]


def mint(key: bytes, expires_ms: int, run: int) -> str:
    payload = f"ik.{expires_ms}.{run}"
    return f"{payload}.{sign(key, payload)}"


def check(key: bytes, token: str, now_ms: int | None = None) -> str:
    """'ok', 'expired' or 'invalid' (used by the API front)."""
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != "ik" or not parts[1].isdigit():
        return "invalid"
    if not hmac.compare_digest(sign(key, ".".join(parts[:3])), parts[3]):
        return "invalid"
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return "ok" if int(parts[1]) > now_ms else "expired"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("state", type=Path)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--fail-after", type=int, default=0)
    parser.add_argument("--mode", default="ok")
    args = parser.parse_args()
    runs = args.state / "runs"
    with runs.open("a") as out:
        out.write(os.environ.get("KUBERNETES_EXEC_INFO", "") + "\n")
    run = len(runs.read_text().splitlines())
    if args.mode == "exit1" or (args.fail_after and run > args.fail_after):
        print("error: the login session expired; run `login` again", file=sys.stderr)
        return 1
    if args.mode == "nonjson":
        print("Token: not-json")
        return 0
    info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
    version = "client.authentication.k8s.io/v0" if args.mode == "wrong-version" \
        else info["apiVersion"]
    expires = time.time() + args.ttl
    stamp = dt.datetime.fromtimestamp(expires, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    # RFC 3339 in whole seconds (as real plugins print): the token itself holds the exact ms,
    # and the stamp is rounded down, so imagekit renews no later than the front expires it
    if args.mode == "cert":       # a client certificate instead of a token (STATE/client.*)
        status = {"clientCertificateData": (args.state / "client.crt").read_text(),
                  "clientKeyData": (args.state / "client.key").read_text(),
                  "expirationTimestamp": stamp}
    else:
        status = {"token": mint((args.state / "key").read_bytes(), int(expires * 1000), run),
                  "expirationTimestamp": stamp}
    json.dump({"apiVersion": version, "kind": "ExecCredential", "status": status}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
