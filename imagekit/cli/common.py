"""What the cluster commands share: their options, how they print, finish and sign.

Public names on purpose: `cli/cluster.py`, `cli/cluster_accept.py` and `cli/gpujob.py` each
import these, never one another's private helpers (tests/unit/test_layering.py). Nothing
heavy at import (the CLI's `--help` stays fast): each helper imports what it uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from imagekit.cli.app import console, option, print_json
from imagekit.errors import InvalidInput

if TYPE_CHECKING:
    from imagekit.attest.phase import Phase
    from imagekit.cluster.kube import Kube
    from imagekit.kube.incluster import InCluster
    from imagekit.oci import Digest, ImageReference
    from imagekit.registry import RegistryClient
    from imagekit.results import CheckReport, Status

KubeconfigOpt = option("--kubeconfig")
EvidenceDir = option("--evidence-dir")
JsonOpt = option("--json")
SelectorOpt = option("--selector")
GpuTolerationOpt = option("--toleration")
SpecOpt = option("--spec")
ProfileOpt = option("--profile")
InsecureOpt = option("--insecure")
CaFileOpt = option("--ca-file", exists=True, dir_okay=False)
SignKeyOpt = option("--key", dir_okay=False,
                    note="Signs what this phase saw (cluster, node, imageID, verdicts) and "
                         "attaches it at the registry the image came from (read before "
                         "anything runs).")


def say(text: str) -> None:
    """Plain text for people: no markup, no :emoji: codes (a probe named `a` is not 🅰)."""
    console.print(text, markup=False, emoji=False, soft_wrap=True)


def print_report(report: CheckReport, json_output: bool) -> None:
    """A report as JSON, or its verdict first, then one line per check and where its evidence
    is."""
    if json_output:
        print_json(report)
    else:
        say(f"{report.status.value} {report.subject}")
        for check in report.checks:
            say(f"{check.status.value:8} {check.name}: {check.detail}")
        if report.evidence:
            say(f"evidence: {report.evidence}")


def say_signed(signed: Any) -> None:
    """The line naming the attached phase statement (nothing without one)."""
    if signed is not None:
        say(f"signed {signed.predicate_type}: {signed.repository}@{signed.subject} <- "
            f"{signed.manifest} ({signed.listing})")


def finish(report: CheckReport, json_output: bool, signed: Any = None) -> None:
    """Print the report (with its signed statement, if any) and exit as its checks say:
    0 all PASS, 1 a FAIL or DEFERRED, 2 an ERROR."""
    from imagekit.results import exit_code_for

    if json_output and signed is not None:
        print_json({**report.model_dump(mode="json"),
                    "attestations": [signed.model_dump(mode="json")]})
    else:
        print_report(report, json_output)
        say_signed(signed)
    code = exit_code_for(report.checks)
    if code:
        raise typer.Exit(code)


def sign_phase(phase: Phase, key: Any, report: CheckReport, client: RegistryClient,
               ref: ImageReference, digest: Digest, kube: Kube, *,
               accepted: list[dict] | None = None, verdict: Status | None = None,
               profile: str | None = None) -> Any:
    """With --key: the phase statement signed and attached at `ref`'s registry (None without
    a key). The key was loaded before anything ran."""
    if key is None:
        return None
    from imagekit.attest.phase import phase_predicate
    from imagekit.attest.phase import sign_phase as sign

    predicate = phase_predicate(phase, report, digest=digest, reference=str(ref),
                                cluster=kube.host, accepted=accepted, verdict=verdict,
                                profile=profile)
    return sign(client, ref, digest, predicate, key)


def images_spec(given: Path | None = None) -> Path | None:
    """The images spec a command reads: `--spec`, else $IMAGEKIT_IMAGES_SPEC (the settings;
    made absolute, as the spec loader always did), else None: the default one
    (imagekit.spec.default_spec_path: ./dockerfiles/images.toml, else the packaged spec).
    Handed down to every operation that reads the spec (nothing below the CLI reads the
    variable)."""
    if given is not None:
        return given
    from imagekit.cli.app import settings

    env = settings().images_spec
    return env.absolute() if env is not None else None


def kubeconfig_path(explicit: Path | None) -> Path | InCluster:
    """Where a cluster command connects, first found wins: --kubeconfig (or $KUBECONFIG, which
    typer hands in as the same option), the kubeconfig `imagekit infra up --cluster` recorded,
    ~/.kube/config, then in-cluster: the Pod's ServiceAccount ($IMAGEKIT_SERVICEACCOUNT_DIR
    moves its folder). An explicit one must be a readable YAML mapping (checked before any
    other work)."""
    from imagekit.cli.app import settings

    if explicit is not None:
        from imagekit.inputs import load_yaml, read_text

        if not isinstance(load_yaml(read_text(explicit, "--kubeconfig"), str(explicit),
                                    what="--kubeconfig"), dict):
            raise InvalidInput("--kubeconfig is not a kubeconfig (a YAML mapping)",
                               where=str(explicit))
        return explicit
    try:
        from imagekit.infra.state import load_state
        state = load_state(settings().state_dir)
        if state.kubeconfig is not None and state.kubeconfig.is_file():
            return state.kubeconfig
        recorded = state.state_dir / "k8s" / "admin.kubeconfig"
        if recorded.is_file():
            return recorded
    except Exception:  # noqa: BLE001 - no infra state: fall back to the client default
        pass
    from imagekit.kube.incluster import choose
    return choose(serviceaccount_dir=settings().serviceaccount_dir)


def registry_client(registry: str) -> tuple[RegistryClient, Path | None]:
    """A RegistryClient for `registry`, trusting the infra CA and reading infra's docker config
    when the registry is one of infra's loopback registries; and that docker config dir (the
    Pods' pull Secret comes from it)."""
    from imagekit.cli.app import settings
    from imagekit.infra.state import registry_trust
    from imagekit.registry import RegistryClient, RegistryOptions

    given = settings()  # the retry knobs and the rest of IMAGEKIT_* registry settings
    options = registry_trust(registry, given.state_dir)
    return RegistryClient(registry, RegistryOptions.from_settings(given, **options)), \
        options.get("docker_config")


def evidence_key_parts(key: str | None) -> tuple[str | None, str | None]:
    """--evidence-key as (digest, name): a digest (sha256:…) is the image's, anything else a
    name; a malformed one is one line (exit 2) before anything is sent or recorded."""
    if not key:
        return None, None
    from imagekit.evidence import EvidenceKey

    try:
        parsed = EvidenceKey.of(key)
    except InvalidInput as exc:
        raise InvalidInput(exc.message, where=exc.where or "--evidence-key") from None
    if parsed.digest is not None:
        return str(parsed.digest), None
    return None, key
