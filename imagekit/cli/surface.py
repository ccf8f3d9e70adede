"""What a user reads of the command line, kept as data: every option's one meaning, placeholder
and default (`OPTIONS`), and the example command lines of every command (`EXAMPLES`).

One name, one meaning: an option spelled the same on two commands is the same concept, with
the same placeholder and the same default, and its help starts with the same sentence. Every
command declares its options through `option()`, which reads this table;
tests/unit/test_cli_options.py walks the whole command tree and fails on an option the table
does not hold, or one whose placeholder, default, variable or help differs from it.

Data only (typer at most): `imagekit --help` imports this module.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import typer

from imagekit import doc_url


class OptionSpec(NamedTuple):
    """One option's single meaning across the tree."""

    #: one sentence: what the option is; every command's help for it starts with this
    meaning: str
    #: what to type (`FILE`, `SECONDS`); None for a flag
    placeholder: str | None = None
    #: the declared default, the same on every command (None: not given)
    default: Any = None
    #: the environment variable that stands for it, if any
    envvar: str | None = None
    #: a flag's "off" spelling (`--no-cluster`), if it has one
    negative: str | None = None
    #: its one-letter spelling, if it has one
    short: str | None = None
    #: given once per value (`--trust-key a.pub --trust-key b.pub`); its default then is a list
    repeatable: bool = False


#: Every option of every command, by its name (`REPEATABLE` below marks those given once per
#: value).
OPTIONS: dict[str, OptionSpec] = {
    # -- the root -------------------------------------------------------------------------
    "--version": OptionSpec("Show imagekit's version, the Kubernetes and engine versions it "
                            "supports, and exit.", default=False),
    "--tmpdir": OptionSpec("Where every temporary file of this run goes (default $TMPDIR, else "
                           "/tmp); each is removed when the run ends, interrupted (Ctrl-C) or "
                           "not.", "DIR"),
    # -- output, evidence, the spec ---------------------------------------------------------
    "--json": OptionSpec("Print one JSON document on stdout, and nothing else there.",
                         default=False),
    "--evidence-dir": OptionSpec("The evidence store's folder (default ./.evidence).", "DIR",
                                 envvar="IMAGEKIT_EVIDENCE_DIR"),
    "--evidence-key": OptionSpec(
        "The evidence key the results are filed under: the image's digest (sha256:…) or a name "
        "(default: a name made from what was checked; `launch-log parse` files nothing "
        "without it).", "KEY"),
    "--spec": OptionSpec("The images spec (default $IMAGEKIT_IMAGES_SPEC, else ./images.toml, "
                         "else ./dockerfiles/images.toml, else the one shipped with imagekit).",
                         "FILE"),
    "--profile": OptionSpec("The spec profile (default: the spec's default profile; `report` "
                            "and `gate` use the one the image's evidence names, if it names "
                            "one).", "NAME"),
    "--out": OptionSpec("Write the output to this file instead of stdout.", "FILE",
                        short="-o"),
    "--out-dir": OptionSpec("The folder the files are written into (created when missing).",
                            "DIR"),
    # -- registries -------------------------------------------------------------------------
    "--insecure": OptionSpec("Allow plain HTTP or unverified TLS for this registry, host:port "
                             "(repeatable; loopback registries need no flag).", "REGISTRY"),
    "--ca-file": OptionSpec("An extra CA certificate (PEM) to trust; "
                            "/etc/docker/certs.d/<host>/ is read too.", "FILE"),
    "--call-timeout": OptionSpec("The longest one registry call may go without progress, "
                                 "retries included, in seconds (default 30).", "SECONDS",
                                 envvar="IMAGEKIT_DEADLINE"),
    "--verbose": OptionSpec("Show retries and HTTP requests on stderr.", default=False),
    "--platform": OptionSpec("The platform to pick from an image index.", "OS/ARCH",
                             "linux/amd64"),
    "--only-platform": OptionSpec("Promote only this platform of an image index (the digest "
                                  "then changes; --json says so).", "OS/ARCH"),
    "--all-platforms": OptionSpec("Copy the whole image index (what a promote does without "
                                  "--only-platform too).", default=False),
    # -- keys and trust ----------------------------------------------------------------------
    "--key": OptionSpec("The private key file to sign with, e.g. release.key (`attest` falls "
                        "back to $IMAGEKIT_SIGNING_KEY; every other command signs nothing "
                        "without it).", "FILE"),
    "--trust-key": OptionSpec("A signer's public key file, e.g. ci.pub, whose signed "
                              "statements count (repeatable; also $IMAGEKIT_TRUST_KEYS, "
                              "os.pathsep-separated).", "KEY"),
    "--trust-policy": OptionSpec(
        "A trust policy (YAML/TOML): per key a name, the statement types and promotion links "
        f"it may vouch for, whether its acceptances count ({doc_url('reference/trust-policy')}; "
        "also $IMAGEKIT_TRUST_POLICY).", "FILE"),
    "--name": OptionSpec("The name of the key pair: NAME.key (private) and NAME.pub.",
                         "NAME"),
    "--overwrite": OptionSpec("Replace files that are already there.", default=False),
    "--type": OptionSpec("A statement type to sign and attach: test-result, sbom or "
                         "slsa-provenance (repeatable; default: all three, the provenance "
                         "where the build recorded one).", "TYPE"),
    "--require-type": OptionSpec("A statement type that must be there, trusted and PASS: "
                                 "test-result, promotion, sbom or slsa-provenance "
                                 "(repeatable).", "TYPE", ("test-result", "promotion", "sbom")),
    "--require-link": OptionSpec("A chain link that must be PASS besides those the signer "
                                 "required, e.g. gpu-preflight (repeatable).", "LINK"),
    "--require-check": OptionSpec("An evidence check the gate requires, KIND or KIND:CHECK "
                                  "(repeatable; default $IMAGEKIT_REQUIRED_CHECKS, else "
                                  "probe,images-verify).", "KIND[:CHECK]"),
    # -- images ------------------------------------------------------------------------------
    "--all-images": OptionSpec("Every image of the spec.", default=False),
    "--image": OptionSpec("Only this image of the spec, by its NAME (repeatable).", "NAME"),
    "--check": OptionSpec("Only compare: fail when a tag moved, write nothing.", default=False),
    "--push": OptionSpec("Push to the profile's staging registry (--no-push: build only).",
                         default=True, negative="--no-push"),
    "--no-cache": OptionSpec("Build without any cache (`images verify`: probe again too).",
                             default=False),
    "--rebuild": OptionSpec("Also build each image again on a fresh builder (nothing shared "
                            "but the registry); it must give the digest verified.",
                            default=False),
    "--layers": OptionSpec("Pad the stand-in base to at least N layers, pushed as "
                           "<tag>-layers<N> and pinned (off when omitted).", "N"),
    "--layers-for": OptionSpec("With --layers: pad only this image's stand-in (repeatable; "
                               "default every stand-in).", "NAME"),
    "--gguf": OptionSpec("A GGUF file to convert instead of downloading the wheel; it must "
                         "have the pinned SHA-256.", "FILE"),
    "--probe": OptionSpec("Run only this probe, NAME or NAME=ARG,ARG (repeatable; e.g. "
                          "find_spec=nixl,sglang).", "NAME[=ARG,...]"),
    "--probes-dir": OptionSpec("The folder of in-image probes (*.py) (default "
                               "$IMAGEKIT_PROBES_DIR, else the ones shipped with imagekit).",
                               "DIR"),
    "--find-spec": OptionSpec("A module find_spec must resolve in the image (repeatable).",
                              "MODULE"),
    "--engine": OptionSpec("The inference engine: sglang or vllm (`accept` and `bench` also "
                           "transformers or generic); found out when omitted, from the spec, "
                           "the image reference, the server or the log.", "ENGINE"),
    "--engine-env": OptionSpec("An environment variable of the engine's launch, KEY=VALUE: "
                               "launch.sh's TP, MAX_CONTEXT, MAX_REQUESTS, "
                               "DISABLE_PIECEWISE_CUDA_GRAPH, … (repeatable).", "KEY=VALUE"),
    "--engine-arg": OptionSpec("An extra argument appended to the engine's serve command "
                               "(repeatable).", "ARG"),
    # -- promote -------------------------------------------------------------------------------
    "--via": OptionSpec("A relay hop imagekit copies to, in order (repeatable).", "REF"),
    "--await": OptionSpec("A hop that replicates by itself (pull-through cache, sync job): "
                          "nothing is copied there; it is polled until it serves the digest "
                          "(repeatable, in order with --via; the last one may stand for --to).",
                          "REF"),
    "--to": OptionSpec("The final destination (not needed after a last --await).", "REF"),
    "--await-timeout": OptionSpec("The longest an awaited hop may take to serve the digest, "
                                  "in seconds.", "SECONDS", 900.0),
    "--await-interval": OptionSpec("The first wait between polls, in seconds (doubles, at "
                                   "most 30).", "SECONDS", 1.0),
    "--force": OptionSpec("Promote despite the evidence gate (needs --reason; recorded).",
                          default=False),
    "--reason": OptionSpec("Why --force (recorded in the evidence).", "TEXT"),
    "--fail-fast": OptionSpec("With several sources: stop the other images cleanly at the first "
                              "failure.", default=False),
    "--diffids": OptionSpec("Download, decompress and hash every layer of the copy.",
                            default=False),
    # -- reports -------------------------------------------------------------------------------
    "--format": OptionSpec("The report format: md, json, junit, intoto, html, or all (every "
                           "one, into --out-dir).", "FORMAT", "md", short="-f"),
    "--record": OptionSpec("Also archive every format as an evidence attempt of kind `report` "
                           "(append-only).", default=False),
    "--kind": OptionSpec("Only attempts of this kind.", "KIND"),
    "--log": OptionSpec("The run's log, kept in the evidence beside the preflight's JSON.",
                        "FILE"),
    # -- acceptance ----------------------------------------------------------------------------
    "--base-url": OptionSpec("The server's root, e.g. http://127.0.0.1:8000 (/v1 ok).", "URL"),
    "--model": OptionSpec("The model to ask for (default: the first of /v1/models).", "NAME"),
    "--engine-version": OptionSpec("The engine's release, for the known-defect table (default: "
                                   "asked from /version).", "VERSION"),
    "--api-key-file": OptionSpec("A file holding the server's API key (or $IMAGEKIT_API_KEY; "
                                 "never on the command line).", "FILE"),
    "--engine-config": OptionSpec("A TOML file overriding per-engine mode fields and known "
                                  "defects for the suites.", "FILE"),
    "--request-timeout": OptionSpec("The longest one request to the server may take, in "
                                    "seconds.", "SECONDS", 600.0),
    "--suite": OptionSpec("An acceptance suite: functional, media, needle, or all "
                          "(repeatable).", "SUITE", ("functional",)),
    "--max-tokens": OptionSpec("The most tokens the server may answer each suite request with "
                               "(a random-weight stand-in is capped at 16).", "TOKENS", 2048),
    "--cases": OptionSpec("The semantic cases: a shipped set (record, stand-in) or a cases FILE "
                          "(default: the spec profile's set where the command takes "
                          "--profile, else record).", "NAME|FILE"),
    "--reproductions": OptionSpec("Identical repeats of the arithmetic case (default: the "
                                  "cases').", "N"),
    "--needle-tokens": OptionSpec("The size of the needle document, in tokens (default: the "
                                  "cases' share of the served context).", "TOKENS"),
    "--needle-wrapper": OptionSpec("A prompt wrapper the needle is asked under, by its name in "
                                   "the cases (repeatable; default: all of them).", "WRAPPER"),
    "--needle-samples": OptionSpec("Documents with the key per position (default: the "
                                   "cases').", "N"),
    "--needle-position": OptionSpec("Where in the document the key is put, 0.0 (start) to 1.0 "
                                    "(end) (repeatable; default: the cases').", "FRACTION"),
    "--require-capability": OptionSpec("A capability the server must have: image, video, "
                                       "tools or ctx=N (comma-separated or repeatable); an "
                                       "absent one is a FAIL.", "CAP"),
    "--matrix": OptionSpec("A load matrix (TOML): rounds of concurrent requests and what each "
                           "must return.", "FILE"),
    "--no-calibrate": OptionSpec("Assume 1 token per prompt word.", default=False),
    "--compare-with": OptionSpec("An image (registry/repository) whose previously accepted "
                                 "digest this run is compared with: a regression check.",
                                 "REPO"),
    # -- the engine's Pod and its startup --------------------------------------------------------
    "--pod-image": OptionSpec("Print the engine server's Pod and ConfigMap (YAML) for this "
                              "image (repo@sha256:…) instead.", "REF"),
    "--pod-name": OptionSpec("The Pod's name.", "NAME", "engine"),
    "--startup-log": OptionSpec("An observed engine startup log to size the startupProbe "
                                "from.", "FILE"),
    "--startup-seconds": OptionSpec("The startupProbe budget, in seconds (default: from an "
                                    "observed start, the evidence's last one or "
                                    "--startup-log, else 900).", "SECONDS"),
    "--startup-probe-seconds": OptionSpec("The startupProbe budget to judge the log against "
                                          "(failureThreshold × periodSeconds).", "SECONDS"),
    "--expect-prefill-graphs": OptionSpec("disabled or enabled: check the log against "
                                          "DISABLE_PIECEWISE_CUDA_GRAPH.", "STATE"),
    # -- the cluster ---------------------------------------------------------------------------
    "--kubeconfig": OptionSpec("The kubeconfig to reach the cluster with (default: the one "
                               "`imagekit infra up` recorded, else ~/.kube/config, else the "
                               "Pod's ServiceAccount).", "FILE", envvar="KUBECONFIG"),
    "--namespace": OptionSpec("The Kubernetes namespace of the objects the command makes or "
                              "reads.", "NAMESPACE", "imagekit"),
    "--selector": OptionSpec("A node label KEY=VALUE the Pod's nodeSelector requires "
                             "(repeatable).", "KEY=VALUE"),
    "--toleration": OptionSpec("A toleration of the Pod, KEY[=VALUE]:EFFECT (repeatable; "
                               "default: tolerate nvidia.com/gpu).", "KEY[=VALUE]:EFFECT"),
    "--gpus": OptionSpec("The nvidia.com/gpu the Pod requests (0: none, a CPU run).", "N", 8),
    "--priority-class": OptionSpec("An existing PriorityClass the Pod names.", "NAME"),
    "--preemption-policy": OptionSpec("The preemptionPolicy the Pod spec states: Never or "
                                      "PreemptLowerPriority.", "POLICY"),
    "--non-preempting": OptionSpec("Require non-preempting semantics.", default=False,
                                   negative="--no-non-preempting"),
    "--storage-label": OptionSpec("A node label KEY[=VALUE] the model volume needs.",
                                  "KEY[=VALUE]"),
    "--storage-driver": OptionSpec("A CSI driver the model volume needs on the node.",
                                   "DRIVER"),
    "--model-claim": OptionSpec("A PersistentVolumeClaim that holds the model, mounted "
                                "read-only.", "NAME"),
    "--node": OptionSpec("The target node's name.", "NODE"),
    "--pod-file": OptionSpec("Read the Pod from a manifest (YAML or JSON).", "FILE"),
    "--image-cuda": OptionSpec("The image's CUDA version (torch.version.cuda), judged against "
                               "the node's driver (GPU feature discovery labels).", "VERSION"),
    "--image-arch": OptionSpec("The image's GPU arch list, comma-separated "
                               "(torch.cuda.get_arch_list()), judged against the GPU.", "ARCH"),
    "--pod-timeout": OptionSpec("The longest to wait for the Pod's outcome, in seconds.",
                                "SECONDS", 900.0),
    "--delete-timeout": OptionSpec("The longest to wait for the old Pod to be gone, in "
                                   "seconds.", "SECONDS", 120.0),
    "--run-timeout": OptionSpec("The longest the whole run may take, in seconds.", "SECONDS",
                                1800.0),
    "--expect-digest": OptionSpec("The manifest digest expected: the tag must resolve to it "
                                  "(`images verify --rebuild --image NAME`: this checkout must "
                                  "build it; only the rebuild runs).", "DIGEST"),
    "--keep-pull-secret": OptionSpec("Keep the run's pull Secret (default: deleted with the "
                                     "Pod).", default=False, negative="--no-keep-pull-secret"),
    "--script": OptionSpec("A script or a package's folder run in the Pod with python3 (a "
                           "package runs as -m; default: imagekit's own GPU preflight).",
                           "PATH"),
    "--submit": OptionSpec("Create the Pods when the precheck is clean; without it nothing is "
                           "created: the Pods are rendered into the evidence and prechecked "
                           "(a dry run).", default=False),
    "--each-node": OptionSpec("One independent preflight Pod on every node matching "
                              "--selector, at once, and a node × check table.", default=False),
    "--cordon-failed": OptionSpec("With --each-node: cordon the nodes whose preflight failed.",
                                  default=False),
    "--taint-failed": OptionSpec("With --each-node: taint the nodes whose preflight failed "
                                 "(imagekit.dev/gpu-preflight=failed:NoSchedule).",
                                 default=False),
    "--preflight-arg": OptionSpec("An argument for the preflight script (repeatable).", "ARG"),
    "--nodes": OptionSpec("Run as one distributed job over N nodes (one torchrun world, c10d "
                          "rendezvous through a Service).", "N"),
    "--gpus-per-node": OptionSpec("With --nodes: GPUs per node (0: CPU ranks on gloo, one per "
                                  "Pod).", "N"),
    "--pods-per-node": OptionSpec("With --nodes: Pods per node (more than 1 lets one node take "
                                  "several; its GPUs are split evenly).", "N", 1),
    "--env": OptionSpec("With --nodes: KEY=VALUE in every Pod's environment (repeatable), e.g. "
                        "NCCL_NVLS_ENABLE=0.", "KEY=VALUE"),
    "--job-mode": OptionSpec("With --nodes: auto (an Indexed Job where the server keeps "
                             "completionMode and has cluster DNS, else one Job per index), "
                             "indexed-job or job-per-index.", "MODE", "auto"),
    "--service-account": OptionSpec("The ServiceAccount to create and bind.", "NAME",
                                    "imagekit"),
    "--command": OptionSpec("Grant only what this cluster command needs (repeatable; default: "
                            "probe, gpu-preflight, accept, precheck, recreate).", "COMMAND"),
    "--pod-security": OptionSpec("The Pod Security level the Namespace is labelled to enforce: "
                                 "restricted, baseline or privileged.", "LEVEL", "restricted"),
    "--namespace-object": OptionSpec("Include the Namespace itself, with its Pod Security label "
                                     "(leave it out for a namespace someone else manages).",
                                     default=True, negative="--no-namespace-object"),
    "--served-model-name": OptionSpec("The name the engine serves the model as, and the suites "
                                      "ask for.", "NAME"),
    "--device": OptionSpec("Where the engine runs: gpu (nvidia.com/gpu = TP) or cpu (vLLM's "
                           "CPU platform, no GPU).", "DEVICE", "gpu"),
    "--keep": OptionSpec("Leave the Pods, Service and ConfigMaps in place after the run.",
                         default=False),
    "--force-launch": OptionSpec("Launch even though this image's engine parser rejected the "
                                 "command or could not judge it; the reason is recorded.",
                                 "REASON"),
    "--path": OptionSpec("The model's folder on the node (default: the real instruct model, "
                         "SmolLM2-135M-Instruct, built offline).", "DIR"),
    "--volume": OptionSpec("The PersistentVolume's name.", "NAME", "imagekit-model"),
    "--role": OptionSpec("Check only what this role needs: ci (docker, buildx, base and "
                         "staging registries, disk, evidence), release (registries, evidence, "
                         "the signing key), operator (cluster, RBAC, registries read, evidence) "
                         "or auditor (registries read, evidence); default: every check.",
                         "ROLE"),
    "--min-free": OptionSpec("Free GiB docker's data root must have (default 20: two stand-in "
                             "image phases; raise it for CUDA bases); the evidence store needs "
                             "1 GiB besides.", "GIB"),
    "--label-node": OptionSpec("Give this node the storage capability label.", "NODE"),
    "--delete": OptionSpec("Delete the claim and the volume.", default=False),
    # -- the local infrastructure --------------------------------------------------------------
    "--cluster": OptionSpec("Include the local Kubernetes cluster (--no-cluster leaves it "
                            "out).", default=True, negative="--no-cluster"),
}


#: The options given once per value.
REPEATABLE = frozenset({
    "--insecure", "--trust-key", "--via", "--await", "--require-link", "--require-check",
    "--image", "--layers-for", "--probe", "--find-spec", "--engine-env", "--engine-arg",
    "--needle-wrapper", "--needle-position", "--require-capability", "--selector",
    "--toleration", "--preflight-arg", "--env", "--command", "--type", "--require-type",
    "--suite"})
OPTIONS.update({name: OPTIONS[name]._replace(repeatable=True) for name in REPEATABLE})


def option(name: str, *, note: str = "", required: bool = False, **kwargs: Any) -> Any:
    """typer's Option for `name`, from OPTIONS: its spellings, placeholder, default, variable and
    help (the table's sentence, then `note`: what this command adds). `required`: no default,
    the command needs it. Other keywords (min=, exists=, dir_okay=…) are typer's."""
    spec = OPTIONS[name]
    decls = [f"{name}/{spec.negative}" if spec.negative else name]
    if spec.short:
        decls.append(spec.short)
    default = ... if required else list(spec.default or ()) if spec.repeatable \
        else spec.default
    return typer.Option(default, *decls, metavar=spec.placeholder, envvar=spec.envvar,
                        help=f"{spec.meaning} {note}".strip(), **kwargs)


#: `imagekit --help`'s examples: the path through a release.
ROOT_EXAMPLES: tuple[str, ...] = (
    "imagekit pin && imagekit images verify",
    "imagekit attest 127.0.0.1:5001/imagekit/vllm:v1 --key ci.key",
    "imagekit promote vllm --via 127.0.0.1:5002/imagekit/vllm:v1 "
    "--to 127.0.0.1:5003/imagekit/vllm:v1 --trust-key ci.pub --key release.key",
    "imagekit cluster probe 127.0.0.1:5003/imagekit/vllm:v1 --trust-key ci.pub --key operator.key",
    "imagekit report 127.0.0.1:5003/imagekit/vllm:v1 --trust-key ci.pub --format html "
    "--out vllm.html",
)

#: Every command's examples, by its path: real command lines against the local
#: infrastructure (staging 127.0.0.1:5001, production 127.0.0.1:5002, target 127.0.0.1:5003)
#: and the role keys (ci, release, operator). tests/unit/test_cli_examples.py checks that every
#: command has some and that each one parses.
EXAMPLES: dict[str, tuple[str, ...]] = {
    "pin": ("imagekit pin",
            "imagekit pin --check --profile local",
            "imagekit pin --spec images.toml --json"),
    "build": ("imagekit build vllm",
              "imagekit build --all-images --profile local",
              "imagekit build sglang --no-push --no-cache"),
    "probe": ("imagekit probe vllm",
              "imagekit probe sglang --probe find_spec=nixl,sglang --probe pip_check",
              "imagekit probe 127.0.0.1:5001/imagekit/vllm:v1 --engine vllm "
              "--engine-env TP=2 --json"),
    "images verify": ("imagekit images verify",
                      "imagekit images verify --image vllm --profile local",
                      "imagekit images verify --spec images.toml --json"),
    "promote": ("imagekit promote vllm --via 127.0.0.1:5002/imagekit/vllm:v1 "
                "--to 127.0.0.1:5003/imagekit/vllm:v1 --trust-key ci.pub --key release.key",
                "imagekit promote 127.0.0.1:5001/imagekit/sglang:v1 "
                "--to 127.0.0.1:5002/imagekit/sglang:v1 --only-platform linux/amd64",
                "imagekit promote vllm sglang --via 127.0.0.1:5002/imagekit "
                "--to 127.0.0.1:5003/imagekit --trust-key ci.pub --key release.key"),
    "verify-mirror": ("imagekit verify-mirror 127.0.0.1:5001/imagekit/vllm:v1 "
                      "127.0.0.1:5002/imagekit/vllm:v1",
                      "imagekit verify-mirror vllm 127.0.0.1:5003/imagekit/vllm:v1 --diffids "
                      "--json"),
    "keys generate": ("imagekit keys generate --name ci",
                      "imagekit keys generate --name release --out-dir keys",
                      "imagekit keys generate --name operator --overwrite"),
    "init": ("imagekit init",
             "imagekit init ci --overwrite"),
    "doctor": ("imagekit doctor --role ci",
               "imagekit doctor --role operator --namespace imagekit",
               "imagekit doctor --json"),
    "attest": ("imagekit attest 127.0.0.1:5001/imagekit/vllm:v1 --key ci.key",
               "imagekit attest 127.0.0.1:5001/imagekit/sglang:v1 --key ci.key "
               "--type test-result --json"),
    "verify-attestations": ("imagekit verify-attestations 127.0.0.1:5003/imagekit/vllm:v1 "
                            "--trust-key ci.pub --trust-key release.pub --trust-key operator.pub",
                            "imagekit verify-attestations 127.0.0.1:5001/imagekit/vllm:v1 "
                            "--trust-key ci.pub --require-type test-result --json"),
    "report": ("imagekit report vllm",
               "imagekit report 127.0.0.1:5003/imagekit/vllm:v1 --trust-key ci.pub "
               "--trust-key release.pub --format html --out vllm.html",
               "imagekit report --all-images --format all --out-dir reports"),
    "gate": ("imagekit gate vllm",
             "imagekit gate 127.0.0.1:5001/imagekit/vllm:v1 --trust-key ci.pub --json",
             "imagekit gate sglang --require-check probe --require-check images-verify"),
    "evidence list": ("imagekit evidence list",
                      "imagekit evidence list sha256:"
                      "61622bc675f5dbe91dd84123c974e1e3624ad6a03159f21f1763649f19e8436c --json",
                      "imagekit evidence list --kind probe"),
    "evidence pull": ("imagekit evidence pull 127.0.0.1:5003/imagekit/vllm:v1 "
                      "--trust-key ci.pub --trust-key release.pub",
                      "imagekit evidence pull 127.0.0.1:5001/imagekit/vllm:v1 "
                      "--trust-key ci.pub --json"),
    "gpu-record": ("imagekit gpu-record preflight.json",
                   "imagekit gpu-record preflight.json --evidence-key sha256:"
                   "61622bc675f5dbe91dd84123c974e1e3624ad6a03159f21f1763649f19e8436c "
                   "--log preflight.log"),
    "schemas export": ("imagekit schemas export",
                       "imagekit schemas export schemas --json"),
    "schemas check": ("imagekit schemas check",
                      "imagekit schemas check schemas --json"),
    "accept": ("imagekit accept --base-url http://127.0.0.1:8000",
               "imagekit accept --base-url http://127.0.0.1:8000 --suite all "
               "--require-capability image --evidence-key sha256:"
               "61622bc675f5dbe91dd84123c974e1e3624ad6a03159f21f1763649f19e8436c",
               "imagekit accept --base-url http://127.0.0.1:8000 --cases stand-in "
               "--max-tokens 96 --json"),
    "bench": ("imagekit bench --base-url http://127.0.0.1:8000 --matrix matrix.toml",
              "imagekit bench --base-url http://127.0.0.1:8000 --matrix matrix.toml "
              "--evidence-key sha256:"
              "61622bc675f5dbe91dd84123c974e1e3624ad6a03159f21f1763649f19e8436c "
              "--compare-with 127.0.0.1:5003/imagekit/vllm"),
    "serve-command": ("imagekit serve-command",
                      "imagekit serve-command -- --enable-auto-tool-choice",
                      "imagekit serve-command --pod-image 127.0.0.1:5003/imagekit/vllm@sha256:"
                      "61622bc675f5dbe91dd84123c974e1e3624ad6a03159f21f1763649f19e8436c "
                      "--model-claim model --startup-log start.log"),
    "launch-log parse": ("imagekit launch-log parse start.log",
                         "imagekit launch-log parse start.log --startup-probe-seconds 1800 "
                         "--expect-prefill-graphs disabled --json"),
    "cluster probe": ("imagekit cluster probe vllm",
                      "imagekit cluster probe 127.0.0.1:5003/imagekit/vllm:v1 "
                      "--trust-key ci.pub --trust-key release.pub --key operator.key",
                      "imagekit cluster probe 127.0.0.1:5003/imagekit/sglang:v1 "
                      "--probe find_spec=nixl,sglang --json"),
    "cluster precheck": ("imagekit cluster precheck --node gpu-node-1",
                         "imagekit cluster precheck --node gpu-node-1 --gpus 8 "
                         "--image-cuda 12.8 --image-arch sm_90",
                         "imagekit cluster precheck --pod-file engine-pod.yaml --json"),
    "cluster gpu-preflight": ("imagekit cluster gpu-preflight 127.0.0.1:5003/imagekit/vllm:v1",
                              "imagekit cluster gpu-preflight 127.0.0.1:5003/imagekit/vllm:v1 "
                              "--submit --key operator.key",
                              "imagekit cluster gpu-preflight 127.0.0.1:5003/imagekit/vllm:v1 "
                              "--nodes 2 --gpus-per-node 8 --submit",
                              "imagekit cluster gpu-preflight 127.0.0.1:5003/imagekit/vllm:v1 "
                              "--each-node --selector nvidia.com/gpu.present=true --submit "
                              "--taint-failed"),
    "cluster recreate": ("imagekit cluster recreate engine-pod.yaml",
                         "imagekit cluster recreate engine-pod.yaml --delete-timeout 300 "
                         "--json"),
    "cluster rbac": ("imagekit cluster rbac | kubectl apply -f -",
                     "imagekit cluster rbac --command probe --no-namespace-object"),
    "cluster accept": ("imagekit cluster accept 127.0.0.1:5003/imagekit/vllm:v1 "
                       "--trust-key ci.pub --trust-key release.pub --key operator.key "
                       "--model-claim model",
                       "imagekit cluster accept 127.0.0.1:5003/imagekit/vllm:v1 --device cpu "
                       "--model-claim model --selector imagekit.dev/model-storage=local "
                       "--engine-env MAX_CONTEXT=4096",
                       "imagekit cluster accept vllm --engine-env TP=8 --suite functional "
                       "--suite media --matrix matrix.toml --run-timeout 3600"),
    "cluster model-volume": ("imagekit cluster model-volume --model-claim model",
                             "imagekit cluster model-volume --model-claim model --delete"),
    "infra up": ("imagekit infra up",
                 "imagekit infra up --no-cluster --json"),
    "infra down": ("imagekit infra down",
                   "imagekit infra down --no-cluster"),
    "infra status": ("imagekit infra status",
                     "imagekit infra status --json"),
    "standins build": ("imagekit standins build",
                       "imagekit standins build --layers 63 --layers-for sglang"),
    "standins model": ("imagekit standins model",
                       "imagekit standins model --gguf SmolLM2-135M-Instruct.gguf --json"),
    "rehearsal": ("imagekit rehearsal",
                  "imagekit rehearsal --no-cluster --out-dir reports --json"),
    "completion": ("imagekit completion bash > ~/.local/share/bash-completion/completions/imagekit",
                   "imagekit completion zsh > ~/.zfunc/_imagekit",
                   "imagekit completion fish > ~/.config/fish/completions/imagekit.fish"),
}
