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
from imagekit.cli.surface import option


@app.command("rehearsal")
@guarded
def rehearsal(
    profile: str = option("--profile"),
    spec: Path = option("--spec"),
    cluster: bool = option("--cluster", note="With it the promoted image is probed there."),
    out: Path = option("--out-dir", note="Here the reports (default "
                                         "rehearsal-reports/<UTC>)."),
    evidence_dir: Path = option("--evidence-dir"),
    json_output: bool = option("--json"),
    layers: int = option("--layers", note="The SGLang stand-in only (as `standins build "
                                          "--layers N --layers-for sglang`; 63: as many as the "
                                          "SGLang base image has)."),
) -> None:
    """Run the local stand-in rehearsal of the whole release path, end to end."""
    from imagekit.cli.common import images_spec
    from imagekit.rehearsal import check_layers, check_out, closing_lines, run_rehearsal
    from imagekit.results import exit_code_for, overall
    from imagekit.spec import load_spec

    spec_path = images_spec(spec)
    images = load_spec(spec_path)
    profile_name = images.profile(profile)[0]
    check_layers(layers, images, profile_name)  # bad input before any side effect
    store = evidence_store(evidence_dir)  # before infra up: a run that cannot be recorded
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out = check_out(out or Path("rehearsal-reports") / stamp)  # bad input before any step
    with progress_for(json_output) as sink:
        done = run_rehearsal(images, profile_name, store, out, cluster=cluster, sink=sink,
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
