"""A promotion's evidence written as it goes, so that nothing is lost to an interrupt.

An evidence attempt is written once (`attempt.json` at `finish()`), which a SIGKILL never
reaches. So `run_promote` opens a *live* attempt directory as soon as the gate let the digest
through: `running.json` (pid, process start time, what is being promoted) and one
`hop-N.json` per hop as it lands. A run that ends in any way Python sees (success, an error,
SIGINT/SIGTERM) removes the live directory and records its attempt as before. A directory
left behind is a run that was killed: the next promotion of the same digest finishes it as an
ERROR attempt with the hops it had recorded ("interrupted: process N is gone").
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import psutil

from imagekit.evidence import Attempt, EvidenceKey, EvidenceStore
from imagekit.evidence.kinds import HopEvidence, PromoteEvidence
from imagekit.oci.digest import Digest
from imagekit.results import CheckResult, Status

KIND = "promote"
RUNNING = "running.json"


def _process_start(pid: int) -> float | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22 through
    psutil), None when it is gone:
    a pid alone may have been reused by another process."""
    try:
        process = psutil.Process(pid)
        ticks = (process.create_time() - psutil.boot_time()) * os.sysconf("SC_CLK_TCK")
    except (psutil.Error, ValueError):
        return None
    return float(round(ticks))


class LiveAttempt:
    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        self.hops = 0

    @classmethod
    def begin(cls, store: EvidenceStore, digest: Digest, context: dict[str, Any]
              ) -> LiveAttempt:
        finish_orphans(store, digest)
        attempt = store.begin(digest, KIND, **context)
        attempt.write_json(RUNNING, {"pid": os.getpid(), "process_start": _process_start(
            os.getpid()), "started": time.time(), "digest": str(digest), "context": context})
        return cls(attempt)

    def hop(self, record) -> None:  # a HopRecord
        self.hops += 1
        self.attempt.write_json(f"hop-{self.hops}.json", record)

    def discard(self) -> None:
        """The run ended where Python could record it: the live directory goes."""
        if self.attempt.record is None:
            shutil.rmtree(self.attempt.path, ignore_errors=True)


def finish_orphans(store: EvidenceStore, digest: Digest) -> list[Path]:
    """Finish the live attempts of `digest` whose process is gone, as ERROR with their hops."""
    key = EvidenceKey.of(digest)
    folder = store.root / key.relative / KIND
    done: list[Path] = []
    if not folder.is_dir():
        return done
    for path in sorted(folder.iterdir()):
        running = path / RUNNING
        if (path / "attempt.json").exists() or not running.is_file():
            continue
        try:
            info = json.loads(running.read_text())
            pid, start = int(info["pid"]), info.get("process_start")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        alive = _process_start(pid)
        if alive is not None and (start is None or alive == float(start)):
            continue  # still running (a concurrent promotion)
        hops = []
        for number in range(1, 100):
            hop_file = path / f"hop-{number}.json"
            if not hop_file.is_file():
                break
            try:
                hops.append(json.loads(hop_file.read_text()))
            except (OSError, ValueError):
                break
        context = dict(info.get("context") or {})
        attempt = Attempt(store, key, KIND, path, path.name, context)
        checks = [CheckResult(name=f"hop-{i + 1}", status=Status.PASS,
                              detail=f"{h.get('endpoint')} serves {h.get('digest')}",
                              data=h) for i, h in enumerate(hops)]
        why = (f"interrupted: process {pid} ended without finishing the promotion (killed?) "
               f"after {len(hops)} hop(s)")
        checks.append(CheckResult(name=f"hop-{len(hops) + 1}", status=Status.ERROR, detail=why))
        # a hop file from another version: the checks still carry it
        with contextlib.suppress(KeyError, TypeError, ValueError):
            attempt.write_result(PromoteEvidence(
                source=str(context.get("source", "")), digest=str(digest),
                via=list(context.get("via") or []), to=context.get("to"), error=why,
                hops=[HopEvidence(endpoint=h["endpoint"], registry=h["registry"],
                                  digest=h["digest"], verified=bool(h["verified"]),
                                  bytes_moved=int(h.get("bytes_moved", 0)),
                                  read_back=str(h.get("read_back", "")),
                                  referrers=(list(h.get("referrers") or [])
                                             if h.get("mode", "copy") == "copy" else None))
                                  for h in hops]))
        attempt.finish(Status.ERROR, summary=why, checks=checks)
        done.append(path)
    return done
