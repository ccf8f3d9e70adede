"""`imagekit keys generate`, `imagekit attest REF`, `imagekit verify-attestations REF`: signed
statements that travel with the digest, and the check a consumer runs with the public key
alone.

Keys are files: the private key path may be given (`--key`), never its content."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from imagekit.cli import trustopts
from imagekit.cli.app import SUMMARIES, SentenceGroup, app, console, guarded, print_json, settings
from imagekit.cli.surface import option
from imagekit.cli.trustopts import TrustPolicyOpt
from imagekit.errors import InvalidInput

if TYPE_CHECKING:  # each command imports what it uses (`imagekit --help` stays fast)
    from imagekit.oci import ImageReference
    from imagekit.registry import ClientPool

keys_app = typer.Typer(cls=SentenceGroup, help=SUMMARIES["keys"], no_args_is_help=True)
app.add_typer(keys_app, name="keys")

Insecure = option("--insecure")
CaFile = option("--ca-file", exists=True, dir_okay=False)
JsonOpt = option("--json")


def _ref(text: str) -> ImageReference:
    from imagekit.oci import ImageReference

    try:
        return ImageReference.parse(text)
    except InvalidInput as exc:
        raise InvalidInput(f"REF: {exc.message}", where=exc.where) from None


def _pool(insecure: list[str], ca_file: Path | None) -> ClientPool:
    from imagekit.registry import ClientPool

    return ClientPool(trustopts.flagged_options(insecure, ca_file))


@keys_app.command("generate")
@guarded
def keys_generate(
    name: str = option("--name", note="Written into the current folder unless --out-dir; "
                       "reports call the signer NAME. Without it: imagekit.key and imagekit.pub "
                       "in the key directory, where attest and promote find them."),
    out: str = option("--out-dir", note="Here: the key (0600) and the public key (default: "
                      "with --name the current folder, else $IMAGEKIT_KEY_DIR or "
                      "~/.config/imagekit/keys)."),
    force: bool = option("--overwrite"),
) -> None:
    """Make a signing key pair. Give consumers the .pub (and its fingerprint, which a trust
    policy names it by); keep the .key."""
    from imagekit.attest.keys import default_key_dir, fingerprint, generate

    if out is not None and (not out.strip() or "\x00" in out):
        raise InvalidInput("--out-dir needs a directory path, not an empty string",
                           where="--out-dir")
    if out is not None:
        folder = Path(out)
    else:
        folder = Path() if name is not None else default_key_dir(settings().key_dir)
    private, public = generate(folder, overwrite=force, name=name)
    console.print(f"private key: {private} (0600)", markup=False)
    console.print(f"public key:  {public}", markup=False)
    console.print(f"fingerprint: {fingerprint(public)}", markup=False)


@app.command("attest")
@guarded
def attest_cmd(
    reference: str = typer.Argument(..., help="The image (registry/repo:tag or @digest)."),
    key: Path = option("--key", dir_okay=False,
                       note="Without it and $IMAGEKIT_SIGNING_KEY: the key folder's "
                            "imagekit.key."),
    kind: list[str] = option("--type"),
    spec: Path = option("--spec", note="The test-result statement is the report of the "
                                       "image's evidence under it."),
    json_output: bool = JsonOpt,
    insecure: list[str] = Insecure,
    ca_file: Path = CaFile,
    evidence_dir: Path = option("--evidence-dir"),
) -> None:
    """Sign the test-result, SBOM and SLSA provenance statements of the digest REF serves and
    attach them as OCI referrers (cosign's Sigstore-bundle layout). The SBOM runs the image in
    docker; the provenance is BuildKit's, as the build that pushed the digest recorded it
    (DEFERRED where none did: exit 1 only when --type named it)."""
    from imagekit.attest.keys import default_private_key, load_private
    from imagekit.attest.run import DEFAULT_KINDS, attest_reference
    from imagekit.cli.app import err_console, evidence_store
    from imagekit.cli.common import images_spec
    from imagekit.registry.interrupt import graceful

    unknown = set(kind) - set(DEFAULT_KINDS)
    if unknown:
        raise InvalidInput(f"unknown --type {', '.join(sorted(unknown))}", where="--type")
    kinds = tuple(dict.fromkeys(kind)) or DEFAULT_KINDS
    # every input before anything is signed: the image, the key, the evidence store the
    # statement is made of (writable: the SBOM is recorded there; a file is refused)
    target = _ref(reference)
    key_path = key or default_private_key(settings().signing_key, settings().key_dir)
    load_private(key_path)
    store = evidence_store(evidence_dir)
    engine = None
    if "sbom" in kinds:
        from imagekit.engine import Engine, find_docker_binary

        engine = Engine(binary=find_docker_binary(settings().docker))
    with graceful(), _pool(insecure, ca_file) as pool:  # SIGTERM: one line, exit 130
        outcome = attest_reference(target, key_path, store=store, pool=pool,
                                   engine=engine, kinds=kinds,
                                   required=settings().required_checks_list(),
                                   spec_path=images_spec(spec),
                                   state_dir=settings().state_dir)
    if json_output:
        print_json([a.model_dump(mode="json") for a in outcome.attached])
    else:
        for item in outcome.attached:
            console.print(f"attested {item.predicate_type}: {item.repository}@{item.subject} "
                          f"<- {item.manifest} ({item.listing})", markup=False, soft_wrap=True)
    for check in outcome.deferred:  # stdout holds only the JSON document with --json
        (err_console if json_output else console).print(
            f"{check.status.value} {check.name}: {check.detail}", markup=False, soft_wrap=True)
    if outcome.deferred and kind:
        raise typer.Exit(1)


@app.command("verify-attestations")
@guarded
def verify_cmd(
    reference: str = typer.Argument(..., help="The image at any endpoint (tag or @digest)."),
    trust_key: list[Path] = option("--trust-key", dir_okay=False,
                                   note="Here trusted for every statement type."),
    trust_policy: Path = TrustPolicyOpt,
    kind: list[str] = option("--require-type"),
    require: list[str] = option("--require-link"),
    spec: Path = option("--spec", note="A required slsa-provenance is checked against its "
                                       "lock and Dockerfiles."),
    image: list[str] = option("--image", note="The image REF is, for the slsa-provenance "
                                             "check (default: the spec's image whose "
                                             "repository is REF's)."),
    profile: str = option("--profile", note="Whose lock pins the base the slsa-provenance "
                                            "must name."),
    json_output: bool = JsonOpt,
    insecure: list[str] = Insecure,
    ca_file: Path = CaFile,
) -> None:
    """Verify every attestation of the digest REF serves. Bundles of keys that are not trusted
    are named and ignored (as cosign does); per type the newest trusted statement, by the time
    signed inside it, decides. A required slsa-provenance must name the lock's base and the
    checkout's Dockerfile. Exit 0 all PASS, 1 a FAIL, 2 error."""
    from imagekit.attest.statements import SLSA_PROVENANCE_TYPE
    from imagekit.attest.verify import type_uri, verify_reference
    from imagekit.registry.interrupt import graceful
    from imagekit.results import Status

    ref = _ref(reference)
    for name in kind:
        type_uri(name)
    if len(image) > 1:
        raise InvalidInput("give one --image: the image REF is", where="--image")
    provenance_image = None
    if SLSA_PROVENANCE_TYPE in {type_uri(name) for name in kind}:
        from imagekit.cli.common import images_spec
        from imagekit.provenance import resolve_served

        provenance_image = resolve_served(ref.repository, image[0] if image else None,
                                          profile, images_spec(spec))
    # each key read before the registry is asked: P-384, a FIFO, /dev/zero are exit 2
    trust = trustopts.load(trust_key, trust_policy)
    if not trust:
        raise InvalidInput("give the signer's public key: --trust-key KEY, --trust-policy FILE "
                           "or $IMAGEKIT_TRUST_KEYS")
    with graceful(), _pool(insecure, ca_file) as pool:  # SIGTERM: one line, exit 130
        report = verify_reference(ref, trust, types=kind, require=require, pool=pool,
                                  provenance_image=provenance_image)
    if json_output:
        print_json(report)
    else:
        console.print(f"{report.reference} -> {report.digest}: {report.status.value}",
                      markup=False, soft_wrap=True)
        for check in report.checks:
            console.print(f"  {check.status.value:8} {check.name}: {check.detail}",
                          markup=False, soft_wrap=True)
    if report.status is not Status.PASS:
        raise typer.Exit(1 if report.status in (Status.FAIL, Status.DEFERRED) else 2)
