"""`imagekit evidence list|show`: read the append-only evidence store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from imagekit.cli import trustopts
from imagekit.cli.app import (
    SUMMARIES,
    SentenceGroup,
    app,
    console,
    evidence_store,
    guarded,
    print_json,
)
from imagekit.cli.surface import option
from imagekit.cli.trustopts import TrustKeyOpt, TrustPolicyOpt
from imagekit.errors import InvalidInput

evidence_app = typer.Typer(cls=SentenceGroup, help=SUMMARIES["evidence"], no_args_is_help=True)
app.add_typer(evidence_app, name="evidence")

EvidenceDir = option("--evidence-dir")
JsonOpt = option("--json")


@evidence_app.command("list")
@guarded
def list_attempts(
    key: str = typer.Argument(None, metavar="KEY",
                              help="An evidence key: an image's digest (sha256:…) or a name; "
                                   "every key when omitted."),
    kind: str = option("--kind"),
    evidence_dir: Path = EvidenceDir,
    json_output: bool = JsonOpt,
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
    rows: list[dict[str, Any]] = []
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


@evidence_app.command("pull")
@guarded
def pull_attested(
    reference: str = typer.Argument(..., help="The image at a registry (tag or @digest)."),
    trust_key: list[Path] = TrustKeyOpt,
    trust_policy: Path = TrustPolicyOpt,
    evidence_dir: Path = EvidenceDir,
    insecure: list[str] = option("--insecure"),
    ca_file: Path = option("--ca-file", exists=True, dir_okay=False),
    json_output: bool = JsonOpt,
) -> None:
    """Import the statements trusted keys signed about the digest REF serves: each bundle
    verified (trusted key, subject = served digest, every blob re-hashed) and filed as kind
    `attested` with its provenance. Other signers' bundles are named and ignored. Exit 1 when
    a referrer was refused (changed at the registry, about another digest) or unreadable."""
    import typer as _typer

    from imagekit.attest.pull import pull_attestations
    from imagekit.oci import ImageReference
    from imagekit.registry import ClientPool

    ref = ImageReference.parse(reference)
    trust = trustopts.load(trust_key, trust_policy)
    if not trust:
        raise InvalidInput("give the keys to trust: --trust-key PUB, --trust-policy FILE or "
                           "$IMAGEKIT_TRUST_KEYS")
    store = evidence_store(evidence_dir)
    with ClientPool(trustopts.registry_options(ref.registry, insecure, ca_file)) as pool:
        client = pool.get(ref.registry)
        digest = ref.digest or client.get_manifest(ref.repository, ref.identifier).digest
        outcome = pull_attestations(client, ref.repository, digest, trust, store)
    if json_output:
        print_json(outcome)
    else:
        console.print(f"{ref} -> {digest}: {len(outcome.filed)} filed, "
                      f"{len(outcome.already)} already here, {len(outcome.ignored)} ignored, "
                      f"{len(outcome.problems)} unusable", markup=False, soft_wrap=True)
        for check in outcome.checks:
            console.print(f"  {check.status.value:8} {check.name}: {check.detail}",
                          markup=False, soft_wrap=True)
        for where in outcome.filed:
            console.print(f"  filed {where}", markup=False, soft_wrap=True)
    if outcome.problems:
        raise _typer.Exit(1)
