#!/usr/bin/env python3
"""Sub-script of controller.py in the acceptance controller Pod (`imagekit cluster accept`):
run imagekit's acceptance suites (and the load matrix, when one sits beside this file) against
the engine behind the Service, into an evidence store inside the Pod, then print every attempt
on one line (`IMAGEKIT-ATTEMPT {json}`) so the operation outside files it under the engine
image digest in the real store.

Beside-file lookups go through ``Path(__file__).absolute().parent`` (the ConfigMap's stable
entry), never ``resolve()``: the ConfigMap may be updated while the controller waits
(section 9).

Exit codes: 0 the suites ran (whatever the model's verdicts: those are in the attempts);
3 the harness itself broke (recorded by the operation as a controller failure, never as a
model failure or a request error).

Environment: BASE_URL, SUITES (comma-separated), REQUIRE, DIGEST, MODEL, MAX_TOKENS,
REPRODUCTIONS (default: the cases'), MATRIX, ENGINE_CONFIG and CASES (file names beside this
one; without CASES the record's cases). MODEL_DIR: the model volume's mount, whose files are
hashed into the evidence (which model the answers were judged on).
"""

from __future__ import annotations

import asyncio
import base64
import os
import sys
import traceback
from pathlib import Path

HERE = Path(__file__).absolute().parent
STORE = Path(os.environ.get("EVIDENCE_DIR", "/tmp/imagekit-evidence"))


def emit(store_root: Path) -> int:
    """Print every attempt of the in-Pod store as one `IMAGEKIT-ATTEMPT` line, through the
    protocol's own model (imagekit/clusteraccept/protocol.py, version 1)."""
    from imagekit.clusteraccept.protocol import AttemptLine
    from imagekit.evidence.store import AttemptRecord

    count = 0
    for record in sorted(store_root.rglob("attempt.json")):
        directory = record.parent
        files = {}
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            if path.name == "attempt.json":
                continue
            files[str(path.relative_to(directory))] = base64.b64encode(path.read_bytes()
                                                                       ).decode()
        line = AttemptLine(attempt=AttemptRecord.model_validate_json(record.read_text()),
                           files=files)
        print(line.to_line(), flush=True)
        count += 1
    return count


def generation() -> str:
    """The ConfigMap version this run sees beside itself (a `generation` key, when there is
    one): through the stable entry, so an update made while the controller waited shows."""
    path = HERE / "generation"
    return path.read_text().strip() if path.exists() else "-"


def model_files(folder: str | None) -> dict[str, str]:
    """sha256 of every file of the model volume, by path inside it (empty without one)."""
    import hashlib

    if not folder or not Path(folder).is_dir():
        return {}
    found = {}
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        found[str(path.relative_to(folder))] = digest.hexdigest()
    return found


async def run() -> None:
    from imagekit.acceptance import ChatClient, SuiteOptions, load_engine_config, load_matrix
    from imagekit.acceptance.capabilities import Requirements
    from imagekit.acceptance.cases import load as load_cases
    from imagekit.acceptance.runner import resolve_target, run_matrix, run_suites
    from imagekit.evidence import EvidenceStore

    print(f"accept_suites: scripts generation {generation()} in {HERE}", flush=True)
    store = EvidenceStore(STORE)
    config_name = os.environ.get("ENGINE_CONFIG")
    config = load_engine_config(HERE / config_name if config_name else None)
    suites = [s for s in os.environ.get("SUITES", "functional").split(",") if s]
    cases_name = os.environ.get("CASES")
    cases, _ = load_cases(HERE / cases_name if cases_name else None)
    reproductions = os.environ.get("REPRODUCTIONS")
    options = SuiteOptions(max_tokens=int(os.environ.get("MAX_TOKENS", "64")),
                           reproductions=int(reproductions) if reproductions else None,
                           cases=cases)
    required = Requirements.parse(os.environ.get("REQUIRE", ""))
    subject = os.environ.get("DIGEST") or "controller"
    async with ChatClient(os.environ["BASE_URL"], timeout=300.0) as client:
        target = await resolve_target(client, os.environ.get("MODEL") or None, None, None,
                                      config)
        print(f"accept_suites: {target.engine} {target.engine_version} {target.model} "
              f"stand-in={target.standin}", flush=True)
        files = model_files(os.environ.get("MODEL_DIR"))
        print(f"accept_suites: cases {cases.name}; {len(files)} model file(s) hashed",
              flush=True)
        if suites:
            await run_suites(client, target, suites, config=config, options=options,
                             store=store, subject=subject, required=required,
                             model_files=files)
    matrix_name = os.environ.get("MATRIX")
    if matrix_name:
        text = (HERE / matrix_name).read_text()
        spec = load_matrix(HERE / matrix_name)
        connections = max(r.concurrency for r in spec.rounds()) + 4
        async with ChatClient(os.environ["BASE_URL"], timeout=300.0,
                              connections=connections) as client:
            target = await resolve_target(client, os.environ.get("MODEL") or spec.model, None,
                                          None, config)
            await run_matrix(client, target, spec, config=config, store=store,
                             subject=subject, matrix_text=text)


def main() -> int:
    try:
        asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - the harness broke: said once, exit 3
        traceback.print_exc()
        emit(STORE)
        from imagekit.clusteraccept.protocol import HarnessErrorLine

        print(HarnessErrorLine(error=f"{type(exc).__name__}: {exc}"[:500]).to_line(),
              flush=True)
        return 3
    print(f"accept_suites: {emit(STORE)} attempt(s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
