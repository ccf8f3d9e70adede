"""`imagekit report`, `imagekit gate`, `imagekit schemas export|check`."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import typer

from imagekit.cli import trustopts
from imagekit.cli.app import (
    SUMMARIES,
    SentenceGroup,
    app,
    console,
    err_console,
    guarded,
    print_json,
    settings,
)
from imagekit.cli.common import images_spec
from imagekit.cli.surface import option
from imagekit.cli.trustopts import TrustKeyOpt, TrustPolicyOpt
from imagekit.errors import CheckFailed, InvalidInput

EvidenceDir = option("--evidence-dir")
Profile = option("--profile", note="Its accepted statuses apply.")
Require = option("--require-check")
Spec = option("--spec", note="An image NAME is its latest build; the profile's accepted "
                             "statuses are read from it.")
Insecure = option("--insecure")
CaFile = option("--ca-file", exists=True, dir_okay=False)


def _required(require: list[str] | None) -> list[str] | None:
    """`--require-check`, else `$IMAGEKIT_REQUIRED_CHECKS` (the settings), else None: the
    defaults."""
    return list(require) if require else settings().required_checks_list()


def _check_profile(profile: str | None, spec: Path | None = None) -> None:
    """An explicit --profile must be one of the spec's: `--profile bogus` is bad input (exit 2),
    not a gate that refuses (exit 1)."""
    if profile is None:
        return
    from imagekit.spec import default_spec_path, load_spec

    path = default_spec_path(images_spec(spec))
    if not path.is_file():
        raise InvalidInput("--profile needs the images spec, and there is none here",
                           where=str(path))
    load_spec(path).profile(profile)


@contextlib.contextmanager
def _reading(subject: str, evidence_dir: Path | None, profile: str | None, trust,  # noqa: ANN001, ANN202
             spec: Path | None, insecure: list[str], ca_file: Path | None):
    """(store, resolution, pull) for a command that reads one image's evidence; with trust, a
    pull of the statements at REF's registry (a bare DIGEST: the store's own only)."""
    from imagekit.evidence import EvidenceStore
    from imagekit.names import looks_like_name
    from imagekit.oci import ImageReference
    from imagekit.registry import ClientPool
    from imagekit.report.resolve import resolve

    store = EvidenceStore(evidence_dir)
    text = subject.strip()
    reference = None
    if trust and text and not text.startswith(("sha256:", "sha512:")):
        if looks_like_name(text):
            from imagekit.names import resolve_target

            target = resolve_target(text, store=store, profile=profile,
                                    spec_path=images_spec(spec),
                                    remote=trustopts.name_resolver(trust, store,
                                                                   insecure=insecure,
                                                                   ca_file=ca_file))
            reference = target.reference
        else:
            reference = ImageReference.parse(text)
    options = trustopts.registry_options(reference.registry, insecure, ca_file) \
        if reference else None
    with ClientPool(options) as pool:
        if reference is not None and looks_like_name(text):
            from imagekit.report.resolve import Resolution

            resolved = Resolution(requested=text, digest=reference.digest, name=text,
                                  how="name", note=f"{text}: {reference}")
        else:
            resolved = resolve(subject, store, profile=profile,
                               options=trustopts.flagged_options(insecure, ca_file),
                               state_dir=settings().state_dir, spec_path=images_spec(spec))
        if resolved.note:
            err_console.print(resolved.note, markup=False, soft_wrap=True)
        yield store, resolved, trustopts.puller(trust, reference, pool)


@app.command("report")
@guarded
def report_command(
    subject: str = typer.Argument(None, metavar="NAME|REF|DIGEST",
                                  help="An image of the spec (its latest build), a reference, "
                                       "or a digest."),
    all_images: bool = option("--all-images", note="Each one's latest build of the profile, "
                                                   "into --out-dir; exit 1 if one is "
                                                   "missing."),
    fmt: str = option("--format"),
    json_output: bool = option("--json", note="The same as --format json."),
    out: Path = option("--out"),
    out_dir: Path = option("--out-dir", note="With --format all or --all-images."),
    require: list[str] = Require,
    profile: str = Profile,
    record: bool = option("--record"),
    spec: Path = Spec,
    trust_key: list[Path] = TrustKeyOpt,
    trust_policy: Path = TrustPolicyOpt,
    insecure: list[str] = Insecure,
    ca_file: Path = CaFile,
    evidence_dir: Path = EvidenceDir,
) -> None:
    """Report everything the evidence says about one image: versions, base, fix layers, each
    check with its evidence path, digests at every endpoint, GPU preflight, acceptance."""
    from imagekit.evidence import EvidenceStore
    from imagekit.report import build_report, render
    from imagekit.report.decision import derive
    from imagekit.report.render import FORMATS, write_all
    from imagekit.report.resolve import resolve

    if json_output:
        if fmt not in ("md", "json"):
            raise InvalidInput(f"--json is --format json, not --format {fmt}")
        fmt = "json"
    if fmt not in (*FORMATS, "all"):
        raise InvalidInput(f"unknown report format {fmt!r} (one of {', '.join(FORMATS)}, all)")
    several = fmt == "all" or all_images
    if several and out_dir is None:
        raise InvalidInput("--format all and --all-images write several files: give "
                           "--out-dir DIR" + (" (--out is one file)" if out is not None else ""))
    if not several and out_dir is not None:
        raise InvalidInput("--out-dir is for several files (--format all, --all-images); "
                           "one report goes to --out FILE or stdout")
    if several and out is not None:
        raise InvalidInput("--out is one file; --format all and --all-images write into "
                           "--out-dir")
    if all_images == (subject is not None):
        raise InvalidInput("give either NAME|REF|DIGEST or --all-images")
    from imagekit.inputs import writable_dir, writable_file

    # before any registry lookup: nothing done that cannot be written
    if out_dir is not None:
        writable_dir(out_dir, "--out-dir")
    if out is not None:
        writable_file(out, "--out")
    _check_profile(profile, spec)
    trust = trustopts.load(trust_key, trust_policy)
    store = EvidenceStore(evidence_dir)
    if all_images:
        from imagekit.report.batch import reports_for_spec

        results = reports_for_spec(store, out_dir, fmt=fmt, profile=profile,
                                   required=_required(require), spec_path=images_spec(spec),
                                   state_dir=settings().state_dir)
        for item in results:
            if item.missing:
                err_console.print(f"{item.image}: no report: {item.missing}", markup=False)
            else:
                err_console.print(f"{item.image}: {item.decision} → {', '.join(item.files)}",
                                  markup=False)
        if any(item.missing for item in results):
            raise typer.Exit(CheckFailed.exit_code)
        return
    if trust:
        from imagekit.report.chain import report_with_trust

        with _reading(subject, evidence_dir, profile, trust, spec, insecure, ca_file) as \
                (store, resolved, pull):
            report = report_with_trust(store, resolved.digest, trust, pull,
                                       required=_required(require), requested=subject,
                                       name=resolved.name, profile=profile,
                                       resolution=resolved.note or None,
                                       spec_path=images_spec(spec),
                                       state_dir=settings().state_dir)
    else:
        resolved = resolve(subject, store, profile=profile,
                           options=trustopts.flagged_options(insecure, ca_file),
                           state_dir=settings().state_dir, spec_path=images_spec(spec))
        if resolved.note:
            err_console.print(resolved.note, markup=False, soft_wrap=True)
        report = build_report(store, resolved.digest, required=_required(require),
                              requested=subject, name=resolved.name, profile=profile,
                              resolution=resolved.note or None, spec_path=images_spec(spec),
                              state_dir=settings().state_dir)
    if record:
        from imagekit.report.render import record_report

        where = record_report(store, report)
        err_console.print(f"archived in {where}", markup=False)
    if fmt == "all":
        written = write_all(report, out_dir)
        for path in written.values():
            err_console.print(f"{derive(report).summary} → {path}", markup=False)
        return
    text = render(report, fmt)
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    err_console.print(f"{fmt} report: {derive(report).summary} → {out}", markup=False)


@app.command("gate")
@guarded
def gate_command(
    subject: str = typer.Argument(..., metavar="NAME|REF|DIGEST",
                                  help="An image of the spec (its latest build), a reference, "
                                       "or a digest."),
    require: list[str] = Require,
    profile: str = Profile,
    spec: Path = Spec,
    trust_key: list[Path] = TrustKeyOpt,
    trust_policy: Path = TrustPolicyOpt,
    insecure: list[str] = Insecure,
    ca_file: Path = CaFile,
    evidence_dir: Path = EvidenceDir,
    json_output: bool = option("--json"),
) -> None:
    """Would the promotion gate let this digest through? Exit 0 yes, 1 no (reasons listed).
    With --trust-key, a digest this store has no evidence of is decided from the statements
    trusted keys signed at REF's registry (each reason names its signer and registry)."""
    from imagekit.report import check_promotable

    _check_profile(profile, spec)
    trust = trustopts.load(trust_key, trust_policy)
    with _reading(subject, evidence_dir, profile, trust, spec, insecure, ca_file) as \
            (store, resolved, pull):
        decision = check_promotable(store, resolved.digest, _required(require), profile=profile,
                                    trust=trust, pull=pull, spec_path=images_spec(spec),
                                    state_dir=settings().state_dir)
    if json_output:
        print_json(decision)
    else:
        console.print(f"{'ALLOWED' if decision.allowed else 'REFUSED'} {decision.digest}",
                      markup=False)
        for reason in decision.reasons:
            console.print(f"  refused: {reason}", markup=False, soft_wrap=True)
        for warning in decision.warnings:
            console.print(f"  warning: {warning}", markup=False, soft_wrap=True)
        for source in decision.sources:
            console.print(f"  source: {source}", markup=False, soft_wrap=True)
        for ignored in decision.ignored:
            console.print(f"  ignored: {ignored}", markup=False, soft_wrap=True)
    if not decision.allowed:
        raise typer.Exit(CheckFailed.exit_code)


schemas_app = typer.Typer(cls=SentenceGroup, help=SUMMARIES["schemas"], no_args_is_help=True)
app.add_typer(schemas_app, name="schemas")


@schemas_app.command("export")
@guarded
def schemas_export(directory: Path = typer.Argument(
                       None, help="Default: the schemas folder inside the installed imagekit."),
                   json_output: bool = option("--json")) -> None:
    """Write the JSON Schema of every document imagekit writes (evidence records, reports)."""
    from imagekit.inputs import writable_dir
    from imagekit.schemas.export import SCHEMA_DIR, export

    writable_dir(directory or SCHEMA_DIR, "schemas directory")
    written = export(directory or SCHEMA_DIR)
    if json_output:
        print_json({"directory": str(directory or SCHEMA_DIR),
                    "written": [str(path) for path in written]})
        return
    console.print(f"{len(written)} schemas in {directory or SCHEMA_DIR}", markup=False)


@schemas_app.command("check")
@guarded
def schemas_check(directory: Path = typer.Argument(
                      None, help="Default: the schemas folder inside the installed imagekit."),
                  json_output: bool = option("--json")) -> None:
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
