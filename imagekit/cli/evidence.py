"""`imagekit evidence list|show`: read the append-only evidence store."""

from __future__ import annotations

from pathlib import Path

import typer

from imagekit.cli.app import app, console, guarded, print_json

evidence_app = typer.Typer(help="Read the evidence store (records keyed by image digest).",
                           no_args_is_help=True)
app.add_typer(evidence_app, name="evidence")

EvidenceDir = typer.Option(None, "--evidence-dir", envvar="IMAGEKIT_EVIDENCE_DIR",
                           help="Evidence store root (default ./.evidence).")


@evidence_app.command("list")
@guarded
def list_attempts(
    key: str = typer.Argument(None, help="A digest (sha256:…) or name; all keys when omitted."),
    kind: str = typer.Option(None, help="Only attempts of this kind."),
    evidence_dir: Path = EvidenceDir,
    json_output: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List attempts per key, oldest first."""
    from rich.table import Table

    from imagekit.evidence import EvidenceStore

    store = EvidenceStore(evidence_dir)
    keys = [key] if key else store.keys()
    rows = []
    for each in keys:
        for record in store.attempts(each, kind):
            rows.append({"key": record.key, "kind": record.kind,
                         "attempt_id": record.attempt_id, "status": record.status.value,
                         "summary": record.summary,
                         "path": str(store.path_of(record))})
    if json_output:
        print_json({"attempts": rows})
        return
    table = Table("key", "kind", "attempt", "status", "summary")
    for row in rows:
        table.add_row(row["key"][:19], row["kind"], row["attempt_id"], row["status"],
                      row["summary"][:60])
    console.print(table)
