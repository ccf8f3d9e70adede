"""`imagekit report`, `imagekit gate`, `imagekit schemas export|check`."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from imagekit.cli.app import app, console, err_console, guarded, print_json
from imagekit.errors import CheckFailed, InvalidInput

EvidenceDir = typer.Option(None, "--evidence-dir", envvar="IMAGEKIT_EVIDENCE_DIR",
                           help="Evidence store root (default ./.evidence).")
Profile = typer.Option(None, "--profile",
                       help="Apply this spec profile's accepted statuses (default: the profile "
                            "the image's evidence names; none when it names none).")
Require = typer.Option(None, "--require",
                       help="Required check, KIND or KIND:CHECK (repeatable; default "
                            "$IMAGEKIT_REQUIRED_CHECKS or probe,images-verify).")


def _check_profile(profile: str | None) -> None:
    """An explicit --profile must be one of the spec's: `--profile bogus` is bad input (exit 2),
    not a gate that refuses (exit 1)."""
    if profile is None:
        return
    from imagekit.spec import default_spec_path, load_spec

    path = default_spec_path()
    if not path.is_file():
        raise InvalidInput("--profile needs the images spec, and there is none here",
                           where=str(path))
    load_spec(path).profile(profile)


@app.command("report")
@guarded
def report_command(
    subject: str = typer.Argument(None, metavar="NAME|REF|DIGEST",
                                  help="An image of the spec (its latest build), a reference, "
                                       "or a digest."),
    all_images: bool = typer.Option(False, "--all-images",
                                    help="Every image of the spec (latest build of the "
                                         "profile) into --out DIR; exit 1 if one is missing."),
    fmt: str = typer.Option("md", "--format", "-f",
                            help="md, json, junit, intoto, html, or all (needs --out DIR)."),
    out: Path = typer.Option(None, "--out", "-o", help="Write to this file instead of stdout "
                             "(a directory with --format all)."),
    require: list[str] = Require,
    profile: str = Profile,
    record: bool = typer.Option(False, "--record", help="Also archive every format as an "
                                "evidence attempt of kind `report` (append-only)."),
    evidence_dir: Path = EvidenceDir,
) -> None:
    """Report everything the evidence says about one image: versions, base, fix layers, each
    check with its evidence path, digests at every endpoint, GPU preflight, acceptance."""
    from imagekit.evidence import EvidenceStore
    from imagekit.report import build_report, render
    from imagekit.report.render import FORMATS, write_all
    from imagekit.report.resolve import resolve

    if fmt not in (*FORMATS, "all"):
        raise InvalidInput(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)}, all)")
    if (fmt == "all" or all_images) and out is None:
        raise InvalidInput("--format all and --all-images write files: give --out DIR")
    if all_images == (subject is not None):
        raise InvalidInput("give either NAME|REF|DIGEST or --all-images")
    if out is not None:      # before any registry lookup: nothing done that cannot be written
        from imagekit.inputs import writable_dir, writable_file

        (writable_dir if fmt == "all" or all_images else writable_file)(out, "--out")
    _check_profile(profile)
    store = EvidenceStore(evidence_dir)
    if all_images:
        from imagekit.report.batch import reports_for_spec

        results = reports_for_spec(store, out, fmt=fmt, profile=profile,
                                   required=require or None)
        for item in results:
            if item.missing:
                err_console.print(f"{item.image}: no report: {item.missing}", markup=False)
            else:
                err_console.print(f"{item.image} {item.digest} ({item.status.value}) → "
                                  f"{', '.join(item.files)}", markup=False)
        if any(item.missing for item in results):
            raise typer.Exit(CheckFailed.exit_code)
        return
    resolved = resolve(subject, store, profile=profile)
    if resolved.note:
        err_console.print(resolved.note, markup=False, soft_wrap=True)
    report = build_report(store, resolved.digest, required=require or None, requested=subject,
                          name=resolved.name, profile=profile,
                          resolution=resolved.note or None)
    if record:
        from imagekit.report.render import record_report

        where = record_report(store, report)
        err_console.print(f"archived in {where}", markup=False)
    if fmt == "all":
        written = write_all(report, out)
        for path in written.values():
            err_console.print(f"{report.subject} ({report.status.value}) → {path}",
                              markup=False)
        return
    text = render(report, fmt)
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    err_console.print(f"{fmt} report of {report.subject} ({report.status.value}) → {out}",
                      markup=False)


@app.command("gate")
@guarded
def gate_command(
    subject: str = typer.Argument(..., metavar="NAME|REF|DIGEST"),
    require: list[str] = Require,
    profile: str = Profile,
    evidence_dir: Path = EvidenceDir,
    json_output: bool = typer.Option(False, "--json", help="Print the decision as JSON."),
) -> None:
    """Would the promotion gate let this digest through? Exit 0 yes, 1 no (reasons listed)."""
    from imagekit.evidence import EvidenceStore
    from imagekit.report import check_promotable
    from imagekit.report.resolve import resolve

    _check_profile(profile)
    store = EvidenceStore(evidence_dir)
    resolved = resolve(subject, store, profile=profile)
    if resolved.note:
        err_console.print(resolved.note, markup=False, soft_wrap=True)
    decision = check_promotable(store, resolved.digest, require or None, profile=profile)
    if json_output:
        print_json(decision)
    else:
        console.print(f"{'ALLOWED' if decision.allowed else 'REFUSED'} {decision.digest}",
                      markup=False)
        for reason in decision.reasons:
            console.print(f"  refused: {reason}", markup=False, soft_wrap=True)
        for warning in decision.warnings:
            console.print(f"  warning: {warning}", markup=False, soft_wrap=True)
    if not decision.allowed:
        raise typer.Exit(CheckFailed.exit_code)


schemas_app = typer.Typer(help="JSON Schemas of every record model.", no_args_is_help=True)
app.add_typer(schemas_app, name="schemas")


@schemas_app.command("export")
@guarded
def schemas_export(directory: Path = typer.Argument(None, help="Default: imagekit/schemas.")
                   ) -> None:
    """Write the schema of every model in imagekit.schemas.export.MODELS."""
    from imagekit.inputs import writable_dir
    from imagekit.schemas.export import SCHEMA_DIR, export

    writable_dir(directory or SCHEMA_DIR, "schemas directory")
    written = export(directory or SCHEMA_DIR)
    console.print(f"{len(written)} schemas in {directory or SCHEMA_DIR}", markup=False)


@schemas_app.command("check")
@guarded
def schemas_check(directory: Path = typer.Argument(None, help="Default: imagekit/schemas."),
                  json_output: bool = typer.Option(False, "--json")) -> None:
    """Exit 1 when a checked-in schema differs from its model (run `schemas export`)."""
    from imagekit.inputs import existing_dir
    from imagekit.schemas.export import SCHEMA_DIR, check

    existing_dir(directory or SCHEMA_DIR, "schemas directory")
    problems = check(directory or SCHEMA_DIR)
    if json_output:
        print_json({"current": not problems, "problems": problems})
    else:
        for problem in problems:
            err_console.print(f"schema {problem}", markup=False)
        if not problems:
            console.print("schemas are current", markup=False)
    if problems:
        raise CheckFailed(f"{len(problems)} schema file(s) are stale; run `imagekit schemas "
                          "export`", where=str(directory or SCHEMA_DIR))
