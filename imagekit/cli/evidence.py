"""`imagekit evidence list|show`: read the append-only evidence store."""

from __future__ import annotations

from pathlib import Path

import typer

from imagekit.cli.app import app, console, evidence_store, guarded, print_json
from imagekit.errors import InvalidInput

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
    """List attempts per key, oldest first (with --json: each one's subjects and roles)."""
    from rich.table import Table

    from imagekit.evidence import EvidenceKey
    from imagekit.inputs import safe_name

    if key is not None:
        EvidenceKey.of(key)  # a malformed key is named before the store is looked at
    if kind is not None:
        safe_name(kind, "--kind")  # `../../x` would read outside the store
    store = evidence_store(evidence_dir, write=False)
    keys = [key] if key else store.keys()
    rows = []
    for each in keys:
        try:
            records = store.attempts(each, kind)
        except (ValueError, UnicodeDecodeError) as exc:  # a corrupt attempt.json: one line
            detail = " ".join(str(exc).split())[:120]
            raise InvalidInput(f"corrupt evidence record under key {each}: {detail}",
                               where=str(store.root / EvidenceKey.of(each).relative)) from None
        for record in records:
            rows.append({"key": record.key, "kind": record.kind,
                         "attempt_id": record.attempt_id, "status": record.status.value,
                         "summary": record.summary, "layout": record.layout,
                         "subjects": [{"digest": str(s.digest), "role": s.role.value,
                                       "reference": s.reference}
                                      for s in store.subjects(record)],
                         "path": str(store.path_of(record))})
    if json_output:
        print_json({"attempts": rows})
        return
    table = Table("key", "kind", "attempt", "status", "summary")
    for row in rows:
        table.add_row(row["key"][:19], row["kind"], row["attempt_id"], row["status"],
                      row["summary"][:60])
    console.print(table)
