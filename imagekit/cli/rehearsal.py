"""`imagekit rehearsal`: the local stand-in rehearsal of the whole release path, end to end.

Options, one call into `imagekit.rehearsal` (the steps, the actors, the evidence attempt),
the closing table.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer

from imagekit.cli.app import (
    app,
    console,
    evidence_store,
    guarded,
    print_json,
    progress_for,
    settings,
)


@app.command("rehearsal")
@guarded
def rehearsal(
    profile: str = typer.Option("local", help="Spec profile (the embedded default: local)."),
    cluster: bool = typer.Option(True, help="Also bring up the cluster and probe there."),
    out: Path = typer.Option(None, help="Reports directory (default rehearsal-reports/<UTC>)."),
    evidence_dir: Path = typer.Option(None, "--evidence-dir", envvar="IMAGEKIT_EVIDENCE_DIR",
                                      help="Evidence store root (default ./.evidence)."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON document."),
    layers: int = typer.Option(
        None, "--layers", metavar="N",
        help="Build the SGLang stand-in with at least N layers (63: the record's SGLang "
             "base; `standins build --layers N --layers-for sglang`), the rest unchanged; "
             "off by default."),
) -> None:
    """Run the local stand-in rehearsal of the whole release path, end to end."""
    from imagekit.cli.common import images_spec
    from imagekit.rehearsal import check_layers, check_out, closing_lines, run_rehearsal
    from imagekit.results import exit_code_for, overall
    from imagekit.spec import load_spec

    spec = load_spec(images_spec())
    profile_name = spec.profile(profile)[0]
    check_layers(layers, spec, profile_name)  # bad input before any side effect
    store = evidence_store(evidence_dir)  # before infra up: a run that cannot be recorded
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = check_out(out or Path("rehearsal-reports") / stamp)  # bad input before any step
    with progress_for(json_output) as sink:
        done = run_rehearsal(spec, profile_name, store, out, cluster=cluster, sink=sink,
                             namespace=settings().accept_namespace, layers=layers,
                             state_dir=settings().state_dir)
    checks = done.checks
    if json_output:
        print_json({"profile": done.profile, "reports": str(done.reports),
                    "promoted": done.promoted, "standin_layers": done.standin_layers,
                    "status": overall(checks).value,
                    "checks": [c.model_dump(mode="json") for c in checks],
                    "evidence": str(done.evidence)})
    elif not console.is_terminal:  # a pipe or a file: whole lines, never cut at 80 columns
        print(f"rehearsal ({done.profile})")
        for line in closing_lines(checks):
            print(line)
        print(f"reports: {out}/index.md   evidence: {done.evidence}", flush=True)
    else:
        from rich.table import Table

        table = Table("step", "status", "detail", title=f"rehearsal ({done.profile})")
        for check in checks:
            table.add_row(check.name, check.status.value, check.detail[:90])
        console.print(table)
        console.print(f"reports: {out}/index.md   evidence: {done.evidence}", markup=False)
    code = exit_code_for(checks)
    if code:
        raise typer.Exit(code)
