"""`imagekit doctor`: what a role needs, checked before it starts (`gh auth status`,
`kubectl auth can-i`): the verdict line first, then one line per check; `--json` for machines;
exit 0 all PASS, 1 a check failed or could not be judged, 2 bad input."""

from __future__ import annotations

from pathlib import Path

import typer

from imagekit.cli.app import app, guarded, print_json, settings
from imagekit.cli.common import EvidenceDir, JsonOpt, KubeconfigOpt, images_spec, say
from imagekit.cli.surface import option
from imagekit.errors import InfraError, InvalidInput

ROLES = ("ci", "release", "operator", "auditor")
#: --min-free's upper bound: 1 PiB, past any disk (a bigger number is a typo, not a plan)
MAX_MIN_FREE_GIB = float(1 << 20)


@app.command("doctor")
@guarded
def doctor(
    role: str = option("--role"),
    spec_file: Path = option("--spec", note="Its profile's registries are checked."),
    profile: str = option("--profile"),
    namespace: str = option("--namespace", note="Whose RBAC the cluster commands need."),
    kubeconfig: Path = KubeconfigOpt,
    insecure: list[str] = option("--insecure"),
    ca_file: Path = option("--ca-file", dir_okay=False),
    evidence_dir: Path = EvidenceDir,
    key: Path = option("--key", dir_okay=False, note="Here: the key to check; without it or "
                       "$IMAGEKIT_SIGNING_KEY no key is checked."),
    min_free: float = option("--min-free"),
    json_output: bool = JsonOpt,
) -> None:
    """Check what a role needs before it starts: the verdict first, then one line per check.

    Exit 0 when every check passes, 1 when one fails or cannot be judged here (DEFERRED, never
    a pass), 2 on bad input. Each network question is bounded to seconds."""
    from imagekit.doctor import DoctorInputs, Part, Role, parts_for, run_doctor
    from imagekit.evidence import EvidenceStore
    from imagekit.inputs import dns_label, pem_ca_file, positive
    from imagekit.registry import RegistryOptions
    from imagekit.results import exit_code_for
    from imagekit.spec import default_spec_path, load_spec

    # every input first, one line and exit 2 each, before anything is asked of anyone
    if role is not None and role not in ROLES:
        raise InvalidInput(f"--role must be one of {', '.join(ROLES)}, not {role!r}",
                           where="--role")
    chosen = Role(role) if role is not None else None
    dns_label(namespace, "--namespace")
    minimum = positive(min_free, "--min-free", maximum=MAX_MIN_FREE_GIB) \
        if min_free is not None else None
    if ca_file is not None:
        pem_ca_file(ca_file)
    spec = load_spec(default_spec_path(images_spec(spec_file)))
    profile_name = spec.profile(profile)[0]
    given = settings()
    parts = parts_for(chosen)
    cluster, missing = None, ""
    if Part.CLUSTER in parts:
        from imagekit.cli.common import kubeconfig_path

        try:   # a bad --kubeconfig is bad input; none found at all is the check's finding
            cluster = kubeconfig_path(kubeconfig)
        except InfraError as exc:
            missing = exc.message
    options = RegistryOptions.from_settings(given, insecure=frozenset(insecure),
                                            ca_file=ca_file)
    signing_key = (key or given.signing_key) if Part.KEY in parts else None
    report = run_doctor(DoctorInputs(
        spec=spec, profile=profile_name, evidence_root=EvidenceStore(evidence_dir).root,
        registry_options=options, role=chosen, namespace=namespace, cluster=cluster,
        cluster_missing=missing, signing_key=signing_key, min_free_gib=minimum,
        docker=given.docker, state_dir=given.state_dir))
    if json_output:
        print_json(report)
    else:
        say(report.summary)
        for check in report.checks:
            say(f"{check.status.value:8} {check.name}: {check.detail}")
    code = exit_code_for(report.checks)
    if code:
        raise typer.Exit(code)
