"""`imagekit gpu-record FILE`: validate a GPU preflight record and keep it as evidence."""

from __future__ import annotations

from pathlib import Path

import typer

from imagekit.cli.app import app, console, evidence_store, guarded, print_json
from imagekit.cli.surface import option
from imagekit.errors import CheckFailed


@app.command("gpu-record")
@guarded
def gpu_record(
    file: Path = typer.Argument(..., help="JSON written by the GPU preflight's --json."),
    evidence_key: str = option("--evidence-key",
                               note="Here: the digest of the image the preflight ran in "
                                    "(without one: gpu-preflight-<host>)."),
    log: Path = option("--log"),
    evidence_dir: Path = option("--evidence-dir"),
    json_output: bool = option("--json"),
) -> None:
    """Validate a GPU preflight record, add it to evidence; exit 1 when its verdict is not PASS."""
    from rich.table import Table

    from imagekit.cli.common import evidence_key_parts
    from imagekit.gpu import record_preflight
    from imagekit.gpu.evidence import summary_line
    from imagekit.inputs import load_json, read_bytes, read_text
    from imagekit.oci import Digest
    from imagekit.results import CheckReport, Status

    digest, name = evidence_key_parts(evidence_key)
    parsed_digest = Digest.parse(digest) if digest else None
    # UTF-8, bounded size, no NaN, no 400-digit integers: checked before anything is recorded
    load_json(read_text(file, "GPU record"), str(file), what="GPU record")
    if log is not None:
        read_bytes(log, "--log", max_bytes=256 * 1024 * 1024)
    store = evidence_store(evidence_dir)
    done = record_preflight(file, store, digest=parsed_digest, name=name, log=log)
    record = done.record
    report = CheckReport.of(f"gpu-preflight {done.key}", list(record.checks),
                            digest=str(parsed_digest) if parsed_digest else None,
                            evidence=done.evidence) if record.checks else None
    if json_output:
        print_json(report if report is not None else
                   {"subject": f"gpu-preflight {done.key}", "status": record.status.value,
                    "error": record.error, "evidence": done.evidence})
    else:
        console.print(f"{summary_line(record)}")
        if record.checks:
            table = Table("status", "check", "detail")
            for check in record.checks:
                table.add_row(check.status.value, check.name, check.detail)
            console.print(table)
        if record.bandwidth is not None and record.bandwidth.sizes:
            bw = Table("bytes", "time µs", "algbw GB/s", "busbw GB/s", "slowest rank",
                       title=f"all_reduce, n={record.bandwidth.n}, busbw = algbw × "
                             f"{record.bandwidth.busbw_factor:.3g}")
            for row in record.bandwidth.sizes:
                bw.add_row(str(row.bytes), f"{row.time_us:.1f}", f"{row.algbw_GBps:.2f}",
                           f"{row.busbw_GBps:.2f}", str(row.slowest_rank))
            console.print(bw)
        console.print(f"evidence: {done.evidence}")
    if record.status is not Status.PASS:
        raise CheckFailed(f"GPU preflight verdict is {record.status.value}",
                          where=str(file)) if record.status is not Status.ERROR else \
            CheckFailed(f"GPU preflight broke: {record.error}", where=str(file))
