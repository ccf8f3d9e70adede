"""SOURCE_DATE_EPOCH of a build: the one time a reproducible image may carry.

The commit time of the newest commit that touched the image's build context (its Dockerfile's
folder): every checkout of that commit, CI's or an auditor's, gets the same value, and an
edit to the Dockerfile moves it. (A shallow clone whose history starts after that commit
gives its first commit's time: `images verify --rebuild --expect-digest` then names the
epoch it used.) Outside git (an unpacked release), the time the lock pinned the
base. The value and where it came from are recorded with the build."""

from __future__ import annotations

import datetime as dt
import subprocess
from pathlib import Path

from pydantic import BaseModel

GIT_TIMEOUT_S = 10.0


class SourceDateEpoch(BaseModel):
    value: int
    origin: str  # "commit <sha> (…)", "lock resolved <time>", or "none"


def source_date_epoch(context: Path, resolved: dt.datetime | None = None) -> SourceDateEpoch:
    """`context`: the build context; `resolved`: the lock's time for the base."""
    try:
        done = subprocess.run(["git", "log", "-1", "--format=%ct %H", "--", "."],
                              cwd=context, capture_output=True, text=True, check=False,
                              timeout=GIT_TIMEOUT_S)
        words = done.stdout.split() if done.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired):
        words = []
    if len(words) == 2 and words[0].isdigit():
        return SourceDateEpoch(value=int(words[0]),
                               origin=f"commit {words[1]} (the newest to touch "
                                      f"{context.name}/)")
    if resolved is not None:
        return SourceDateEpoch(value=int(resolved.timestamp()),
                               origin=f"lock resolved {resolved.isoformat()}")
    return SourceDateEpoch(value=0, origin="none (not in git, the lock has no time)")
