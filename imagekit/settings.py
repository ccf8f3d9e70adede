"""imagekit's settings: every `IMAGEKIT_*` environment variable, declared once.

`Settings` is a pydantic-settings model (prefix `IMAGEKIT_`): each field has its type, its
default and a one-line why. The command line reads it ONCE (`imagekit.cli.app.settings()`, on
the first command that runs) and hands the values down as arguments — a `RegistryOptions`, a
`RetryPolicy`, a directory, a mode. Below the CLI nothing reads `os.environ` for `IMAGEKIT_*`
(tests/unit/test_settings.py scans the package for it), so a library caller configures imagekit
by what it passes, and a test by what it builds, never by what the process happens to carry.

Why not read where used: an option that travels through `os.environ` (`--deadline` did) leaks
into every child and every later call of the process; a read at import time (the accept
namespace, the k8s binaries) freezes the value before a test or a caller can choose it.

Bad values are one line naming the variable, exit 2, before any side effect
(`IMAGEKIT_DEADLINE=nan`), as they were when each reader checked its own. An empty variable is
the same as an unset one, except where an empty list is itself a meaning
(`IMAGEKIT_REQUIRED_LINKS=''`, `IMAGEKIT_REQUIRED_CHECKS=''`).

Fields marked `test_only` exist for the test suite and measurements (A/B switches, tiny
chunks); a user has no reason to set them. docs/environment.md is the table (checked against this
model by tests/unit/test_settings.py: every field is documented there).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from imagekit.errors import InvalidInput
from imagekit.inputs import count, positive

PREFIX = "IMAGEKIT_"
PROGRESS_MODES = ("rich", "plain", "json", "off")
#: `IMAGEKIT_*` names the package spells that are NOT settings of this process, and why.
NOT_SETTINGS = {
    "IMAGEKIT_INDEX": "set by gpujob inside its Pods (the rank's index); read there by the "
                      "Pod's own script, never by imagekit",
    "IMAGEKIT_STATE_ROOT": "written by infra into every process it starts (the state "
                           "directory's identity); read back from /proc/<pid>/environ",
}


def _blank_none(value: Any) -> Any:
    """An empty or blank variable means "not set" (what `os.environ.get(X) or default` did)."""
    if isinstance(value, str) and not value.strip():
        return None
    return value


OptPath = Annotated[Path | None, BeforeValidator(_blank_none)]
OptStr = Annotated[str | None, BeforeValidator(_blank_none)]


def _seconds(env: str, *, zero_ok: bool = False) -> Any:
    """A number of seconds from the environment: finite, > 0 (>= 0 with zero_ok), at most a
    week — or InvalidInput naming the variable (the message imagekit.inputs has always given)."""

    def check(value: Any) -> float | None:
        value = _blank_none(value)
        return None if value is None else positive(value, env, zero_ok=zero_ok,
                                                   maximum=7 * 86400)

    return BeforeValidator(check)


def _attempts(value: Any) -> int | None:
    value = _blank_none(value)
    if value is None:
        return None
    with contextlib.suppress(TypeError, ValueError):
        value = int(value)  # else `count` names the variable and what it got
    return count(value, "IMAGEKIT_RETRY_ATTEMPTS", minimum=1, maximum=1000)


def _chunk(value: Any) -> int | None:
    value = _blank_none(value)
    if value is None:
        return None
    with contextlib.suppress(TypeError, ValueError):
        value = int(value)  # else `count` names the variable and what it got
    return count(value, "IMAGEKIT_UPLOAD_CHUNK", minimum=1, maximum=1 << 40)


def _switch_on(value: Any) -> bool:
    """On unless it says 0/false/no/off (IMAGEKIT_LEAN_HTTP's rule)."""
    if value is None or isinstance(value, bool):
        return True if value is None else value
    return str(value).strip().lower() not in ("0", "false", "no", "off")


def _exactly_one(value: Any) -> bool:
    """Only the value 1 turns it on (IMAGEKIT_DEBUG's rule)."""
    return value is True or (isinstance(value, str) and value == "1")


def _progress(value: Any) -> str | None:
    """A known progress mode, else None (an unknown one is ignored, as it always was)."""
    if value is None:
        return None
    mode = str(value).strip().lower()
    return mode if mode in PROGRESS_MODES else None


def _mirror(value: Any) -> str | None:
    value = _blank_none(value)
    return None if value is None else str(value).rstrip("/")


def _test_only(description: str) -> dict[str, Any]:
    return {"description": description, "json_schema_extra": {"test_only": True}}


class Settings(BaseSettings):
    """Everything imagekit takes from its environment. Read once, at the command line."""

    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore", frozen=True,
                                      case_sensitive=False, env_ignore_empty=False,
                                      populate_by_name=True, validate_default=False)

    # -- evidence, progress, errors -----------------------------------------------------------
    evidence_dir: OptPath = Field(
        None, description="evidence store root for every command (`--evidence-dir` wins); "
                          "default ./.evidence")
    progress: Annotated[str | None, BeforeValidator(_progress)] = Field(
        None, description="progress mode rich|plain|json|off, overriding the terminal's "
                          "choice (the rehearsal sets json for its child steps)")
    debug: Annotated[bool, BeforeValidator(_exactly_one)] = Field(
        False, description="1: an unexpected OSError/ValueError shows its traceback instead of "
                           "one line (for bug reports)")

    # -- registry traffic -----------------------------------------------------------------------
    deadline: Annotated[float | None, _seconds("IMAGEKIT_DEADLINE")] = Field(
        None, description="seconds one registry call may go without progress, retries "
                          "included (`--call-timeout` wins); default 30")
    retry_attempts: Annotated[int | None, BeforeValidator(_attempts)] = Field(
        None, description="tries of one registry call without progress; default 8")
    retry_wait_initial: Annotated[float | None, _seconds("IMAGEKIT_RETRY_WAIT_INITIAL",
                                                         zero_ok=True)] = Field(
        None, description="first backoff wait in seconds; default 0.2")
    retry_wait_max: Annotated[float | None, _seconds("IMAGEKIT_RETRY_WAIT_MAX")] = Field(
        None, description="longest backoff wait in seconds; default 10")
    retry_wait_jitter: Annotated[float | None, _seconds("IMAGEKIT_RETRY_WAIT_JITTER",
                                                        zero_ok=True)] = Field(
        None, description="random seconds added to each wait; default 0.5")
    retry_after_max: Annotated[float | None, _seconds("IMAGEKIT_RETRY_AFTER_MAX")] = Field(
        None, description="a server's Retry-After is cut to this many seconds; default 60")
    retry_broken_window: Annotated[float | None, _seconds("IMAGEKIT_RETRY_BROKEN_WINDOW",
                                                          zero_ok=True)] = Field(
        None, description="seconds a refused/reset/cut connection is retried without "
                          "progress; default 2")
    referrers_deadline: Annotated[float | None, _seconds("IMAGEKIT_REFERRERS_DEADLINE")] = \
        Field(None, description="seconds one whole referrers listing may take; default 3")
    upload_journal: OptPath = Field(
        None, description="where interrupted uploads are remembered for a rerun; default "
                          "~/.cache/imagekit/uploads")
    docker_certs_d: OptPath = Field(
        None, description="docker's per-registry CA folder read for registry TLS; default "
                          "/etc/docker/certs.d")
    upload_chunk: Annotated[int | None, BeforeValidator(_chunk)] = Field(
        None, **_test_only("bytes per upload PATCH (tests make it tiny to interrupt an "
                           "upload mid-blob); default 128 MiB, promote 16 MiB"))
    registries: OptPath = Field(
        None, description="a TOML file of `[registries.\"HOST[:PORT]\"]` tables: each "
                          "registry's upload shape (chunk_size, max_body, monolithic, "
                          "immutable_tags); images.toml may hold the same tables")
    lean_http: Annotated[bool, BeforeValidator(_switch_on)] = Field(
        True, **_test_only("0/false/no/off turns the http.client fast path for blob bodies "
                           "off (A/B measurement, or a registry it misjudges)"))
    docker_config: OptPath = Field(
        None, validation_alias=AliasChoices("DOCKER_CONFIG"),
        description="DOCKER_CONFIG (docker's own variable, no prefix): the folder of the "
                    "config.json registry credentials come from; default ~/.docker")

    # -- trust and attestations ---------------------------------------------------------------
    trust_keys: OptStr = Field(
        None, description="public key files trusted for attestations, os.pathsep-separated "
                          "(added to `--trust-key`)")
    trust_policy: OptPath = Field(
        None, description="the trust policy file (YAML or TOML) when `--trust-policy` is not "
                          "given")
    required_links: str | None = Field(
        None, description="comma-separated links a promotion attestation requires; '' "
                          "requires none (and then proves nothing: the gate refuses); default "
                          "base-identity,build,probes,hops,cluster-imageid")
    required_checks: str | None = Field(
        None, description="comma-separated checks the report gate requires (kind or "
                          "kind:name); default probe,images-verify")
    key_dir: OptPath = Field(
        None, description="where `keys generate` writes the signing key pair; default "
                          "~/.config/imagekit/keys")
    signing_key: OptPath = Field(
        None, description="the private key `attest` signs with (`--key` wins); default "
                          "<key dir>/imagekit.key")
    api_key: SecretStr | None = Field(
        None, description="the acceptance server's API key when `--api-key-file` is not given "
                          "(a secret: never printed, never in argv)")

    # -- inputs: specs, probes, manifests -------------------------------------------------------
    images_spec: OptPath = Field(
        None, description="the images spec (`--spec` wins); default ./dockerfiles/images.toml, "
                          "else the packaged one")
    probes_dir: OptPath = Field(
        None, description="the probe definitions folder; default the packaged probes")
    manifests_dir: OptPath = Field(
        None, description="the Pod templates and scripts folder; default the packaged "
                          "manifests")
    accept_namespace: str = Field(
        "imagekit", description="the namespace of `cluster model-volume` and the "
                                       "rehearsal's acceptance (its PV is named after it)")

    # -- engines, builds, infra -----------------------------------------------------------------
    docker: OptStr = Field(
        None, description="the docker client to drive (a path or a name on PATH); default "
                          "the one that works best here")
    state_dir: OptPath = Field(
        None, description="infra's state (registries, cluster, credentials); default "
                          "/var/lib/imagekit")
    k8s_bin: OptPath = Field(
        None, description="where the one-node cluster's Kubernetes binaries are built; "
                          "default /opt/k8s/bin")
    serviceaccount_dir: OptPath = Field(
        None, description="the ServiceAccount folder (token, ca.crt, namespace) of in-cluster "
                          "credentials, used when no kubeconfig is found; default "
                          "/var/run/secrets/kubernetes.io/serviceaccount")
    engines_dir: OptPath = Field(
        None, description="where the real engines' own virtual environments live; default "
                          "/var/lib/imagekit/engines")
    models_dir: OptPath = Field(
        None, description="where the stand-in models and the instruct model are built "
                          "and cached; default "
                          "/var/lib/imagekit/models")
    cache_dir: OptPath = Field(
        None, description="the stand-in rootfs cache (debootstrap tarballs); default "
                          "/var/cache/imagekit")
    debian_mirror: Annotated[str | None, BeforeValidator(_mirror)] = Field(
        None, description="the Debian archive for stand-in rootfs builds; default the one "
                          "this machine's apt uses")
    pip_cert: OptPath = Field(
        None, description="the CA bundle pip uses inside stand-in builds; default "
                          "$PIP_CERT or the system bundle")
    torch_wheel: OptPath = Field(
        None, description="the torch wheel stand-in builds install; default one found in "
                          "$PIP_FIND_LINKS or /opt/wheels")

    # -- derived views ---------------------------------------------------------------------------
    def trust_key_paths(self) -> list[Path]:
        return [Path(p.strip()) for p in (self.trust_keys or "").split(os.pathsep)
                if p.strip()]

    def required_links_list(self) -> list[str] | None:
        """None when unset (the default chain); [] when set to ''."""
        if self.required_links is None:
            return None
        return [p.strip() for p in self.required_links.split(",")]

    def required_checks_list(self) -> list[str] | None:
        if self.required_checks is None:
            return None
        return [p for p in (q.strip() for q in self.required_checks.split(",")) if p]


#: The CLI modules that build their registry clients with `RegistryOptions.from_settings(
#: settings())`: the registry knobs reach every client through them.
REGISTRY_CLI = ("common", "doctor", "registry", "trustopts")
_REGISTRY = "RegistryOptions.from_settings(settings()) in cli/" + ", cli/".join(REGISTRY_CLI)

#: Where each setting goes, for docs/environment.md: (who reads it: the imagekit/cli/ modules, each
#: through `imagekit.cli.app.settings()`; what it is handed to below the CLI). Checked against
#: the code by tests/unit/test_settings.py: every listed module reads the field (or, for the
#: registry knobs, calls RegistryOptions.from_settings, which reads it) and every CLI module that
#: reads a field is listed.
RECEIVERS: dict[str, tuple[str, str]] = {
    "evidence_dir": ("cli/app", "EvidenceStore(root) of every command (`evidence_store`)"),
    "progress": ("cli/app, cli/registry", "the progress mode (imagekit.progress.choose_mode)"),
    "debug": ("cli/app", "`guarded`: a traceback instead of the one line"),
    "deadline": (_REGISTRY, "RetryPolicy.deadline (`--call-timeout` wins)"),
    "retry_attempts": (_REGISTRY, "RetryPolicy.attempts"),
    "retry_wait_initial": (_REGISTRY, "RetryPolicy.wait_initial"),
    "retry_wait_max": (_REGISTRY, "RetryPolicy.wait_max"),
    "retry_wait_jitter": (_REGISTRY, "RetryPolicy.wait_jitter"),
    "retry_after_max": (_REGISTRY, "RetryPolicy.retry_after_max"),
    "retry_broken_window": (_REGISTRY, "RetryPolicy.broken_window"),
    "referrers_deadline": (_REGISTRY, "RegistryOptions.referrers_deadline_s"),
    "upload_journal": (_REGISTRY, "RegistryOptions.upload_journal"),
    "docker_certs_d": (_REGISTRY, "RegistryOptions.certs_d"),
    "upload_chunk": (_REGISTRY, "RegistryOptions.chunk_size"),
    "registries": (_REGISTRY, "RegistryOptions.shapes"),
    "lean_http": (_REGISTRY, "RegistryOptions.lean_http"),
    "docker_config": (_REGISTRY, "RegistryOptions.docker_config"),
    "trust_keys": ("cli/trustopts", "the TrustPolicy (`trustopts.load`) the gate, report, "
                                    "promote and cluster commands are given"),
    "trust_policy": ("cli/trustopts", "the same TrustPolicy"),
    "required_links": ("cli/registry", "attest_promotion(required=), the promote gate's "
                                       "sign_links"),
    "required_checks": ("cli/attest, cli/cluster_accept, cli/registry, cli/report",
                        "required= of build_report, check_promotable/enforce, "
                        "image_phase_gate, attest_reference/attest_promotion"),
    "key_dir": ("cli/attest", "default_key_dir / default_private_key"),
    "signing_key": ("cli/attest, cli/doctor", "default_private_key; the key doctor checks"),
    "api_key": ("cli/accept", "the acceptance client's API key"),
    "images_spec": ("cli/common (`images_spec`, used by cli/attest, cli/build, cli/cluster, "
                    "cli/cluster_accept, cli/doctor, cli/registry, cli/rehearsal, cli/report)",
                    "load_spec(path); spec_path= of resolve_target, resolve, build_report, "
                    "check_promotable, enforce, image_phase_gate, report_with_trust, "
                    "reports_for_spec, attest_reference, attest_promotion"),
    "probes_dir": ("cli/build, cli/cluster, cli/cluster_accept",
                   "probe_image/verify_images(probes=), the cluster probe's ProbeOptions, "
                   "run_accept(probes_dir=)"),
    "manifests_dir": ("cli/cluster, cli/cluster_accept, cli/engine_launch, cli/gpujob",
                      "template_dir= of render/script_files; ProbeOptions, PreflightOptions, "
                      "FleetOptions.manifests_dir; run_accept(manifests_dir=)"),
    "accept_namespace": ("cli/rehearsal", "run_rehearsal(namespace=)"),
    "docker": ("cli/attest, cli/build, cli/doctor",
               "default_engine(docker) / find_docker_binary"),
    "state_dir": ("cli/attest, cli/build, cli/cluster_accept, cli/common, cli/doctor, "
                  "cli/infra, cli/registry, cli/rehearsal, cli/report, cli/trustopts",
                  "StatePaths(root) of infra up/down/status; load_state(root), "
                  "registry_trust(root); state_dir= of default_engine, resolve, build_report, "
                  "check_promotable, enforce, image_phase_gate, report_with_trust, "
                  "reports_for_spec, attest_reference, attest_promotion, run_rehearsal"),
    "k8s_bin": ("cli/infra", "manager.up/down/status(k8s_bin=)"),
    "serviceaccount_dir": ("cli/common", "incluster.choose(serviceaccount_dir=) in "
                                         "kubeconfig_path, which every cluster command uses"),
    "engines_dir": ("cli/build, cli/cluster_accept", "ensure_instruct_model(engines_dir=), "
                                                     "standin_text_model(engines_dir, …)"),
    "models_dir": ("cli/build, cli/cluster_accept", "ensure_instruct_model(root), "
                                                    "standin_text_model(…, models_dir)"),
    "cache_dir": ("cli/build, cli/cluster_accept", "cache_dir= of build_standins, "
                                                   "ensure_controller_image"),
    "debian_mirror": ("cli/build, cli/cluster_accept, cli/infra",
                      "mirror= of manager.up, build_standins, ensure_controller_image"),
    "pip_cert": ("cli/build, cli/cluster_accept", "pip_cert= of build_standins, "
                                                  "ensure_controller_image"),
    "torch_wheel": ("cli/build", "build_standins(wheel=)"),
}


def env_name(field: str) -> str:
    """The environment variable of a field (`deadline` -> `IMAGEKIT_DEADLINE`)."""
    info = Settings.model_fields[field]
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return str(alias.choices[0])
    return PREFIX + field.upper()


def load(environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of this process's environment (or of `environ`, for a caller that has its
    own); a bad value is InvalidInput (one line naming the variable, exit 2). The CLI calls
    this once per process (`imagekit.cli.app.settings`)."""
    try:
        if environ is None:
            return Settings()
        values = {field: environ[env_name(field)] for field in Settings.model_fields
                  if env_name(field) in environ}
        return Settings.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = str(first.get("loc", ("?",))[0])
        name = env_name(field) if field in Settings.model_fields else field
        raise InvalidInput(f"{name}: {first.get('msg')}", where=name) from None


def markdown_table() -> str:
    """docs/environment.md's table, made from the model (tests/unit/test_settings.py checks the
    page holds exactly this): variable, type, default, why, the CLI modules that read it and
    what they hand it to (RECEIVERS); test-only ones marked."""
    rows = ["| variable | type | default | why | read by | handed to |",
            "|---|---|---|---|---|---|"]
    for field, info in Settings.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        kind = _type_name(info.annotation)
        default = "unset" if info.default is None else f"`{info.default}`"
        why = (info.description or "").replace("|", "\\|")
        if extra.get("test_only"):
            why = f"**test-only:** {why}"
        read_by, handed_to = (part.replace("|", "\\|") for part in RECEIVERS[field])
        rows.append(f"| `{env_name(field)}` | {kind} | {default} | {why} | {read_by} | "
                    f"{handed_to} |")
    return "\n".join(rows) + "\n"


def _type_name(annotation: Any) -> str:
    text = str(annotation).replace("typing.", "").replace("pathlib.", "")
    text = text.replace("pydantic.types.", "").replace("<class '", "").replace("'>", "")
    for noise in ("Annotated[", "Optional["):
        text = text.replace(noise, "")
    return text.split(",")[0].rstrip("]").replace(" | None", "") or "str"
