"""The rehearsal's acceptance step (`make rehearsal`): the promoted vLLM image accepted on the
cluster with the stand-in model, its answers judged by the cases calibrated on it.

The stand-in model is a real instruct model (SmolLM2-135M-Instruct) and the `local` profile
names the `stand-in` cases, which its healthy deployment answers right. So the expectation is
exact: the engine started (live phases in evidence), the controller ran, every protocol aspect
PASSes, every semantic verdict is judged PASS, the load rounds completed, and every DEFERRED
check is one the profile allows, with its reason. A semantic verdict DEFERRED because the model
has random weights means nothing was judged, and fails this check.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from imagekit import packaged
from imagekit.results import CheckResult, Status
from imagekit.spec.models import Acceptance

#: The rehearsal's namespace (created when missing, kept: the claim lives there); the model's
#: PersistentVolume is named after it. IMAGEKIT_ACCEPT_NAMESPACE picks another: the CLI's
#: settings pass it as `namespace` (nothing is read from the environment here, or at import).
NAMESPACE = "imagekit"
#: the real instruct model's volume and claim (named apart from an older volume of the
#: random-weight model, which a PersistentVolume keeps: its path is never changed)
VOLUME = f"{NAMESPACE}-instruct-model"
CLAIM = "instruct-model"
#: the served name of the real instruct model (imagekit.standins.instruct)
from imagekit.standins.instruct import NAME as MODEL  # noqa: E402

STORAGE_SELECTOR = "imagekit.dev/model-storage=local"
#: the packaged stand-in matrix (an absolute path: the rehearsal may run from any folder)
MATRIX = str(packaged.path("manifests", "acceptance", "matrix-standin.toml"))


#: room for the stand-in cases' answers ("1 2 3 4 5 6 7 8 9 10" is 21 tokens)
MAX_TOKENS = 96


def accept_args(reference: str, profile: str, namespace: str = NAMESPACE) -> list[str]:
    """`imagekit cluster accept …` arguments of the rehearsal's step."""
    return ["cluster", "accept", reference, "--device", "cpu", "--namespace", namespace,
            "--model-claim", CLAIM, "--served-model-name", MODEL, "--selector",
            STORAGE_SELECTOR, "--suite", "functional", "--suite", "needle", "--matrix", MATRIX,
            "--engine-env", "MAX_CONTEXT=4096", "--max-tokens", str(MAX_TOKENS),
            "--profile", profile,
            "--json"]


def volume_args(node: str, namespace: str = NAMESPACE) -> list[str]:
    return ["cluster", "model-volume", "--namespace", namespace, "--volume",
            f"{namespace}-instruct-model",
            "--model-claim", CLAIM, "--label-node", node]


from imagekit.acceptance.protocol import STANDIN_REASON  # noqa: E402


def standin_acceptance_check(name: str, report: dict | None,
                             allowed: Mapping[str, Acceptance] | None = None,
                             profile: str | None = None) -> CheckResult:
    """The rehearsal's verdict on one `cluster accept` report, from what the run observed.

    PASS only when a healthy stand-in deployment showed it: the engine started, the controller
    ran, every protocol aspect PASSes, every semantic verdict it ran is judged PASS (at least
    one), at least one load round ran and every round PASSes, and every DEFERRED check is one
    the profile allows (`[profiles.NAME.accept]` `"<image>.cluster-accept:<check>" =
    {status = "DEFERRED", reason = …}`, handed in as `allowed`, by check name).

    FAIL when something answered wrong or broke (a protocol or semantic FAIL, a failed round,
    a random-weight model whose answers were never judged, no semantic verdict at all).

    DEFERRED when nothing answered wrong but a check was left unjudged without the profile's
    leave (a needle cut below the served context, a capability the model lacks): what a
    release engineer expects, since the deployment was not shown wrong, only not shown right;
    the rehearsal still exits 1 (a DEFERRED is never a pass) and the detail names each such
    check and why, so the fix is either the deployment or a reasoned line in the profile.

    Every check of the report is accounted for in `data.accounted`."""
    if not report or "checks" not in report:
        return CheckResult(name=name, status=Status.ERROR,
                           detail="cluster accept printed no report")
    allowed = allowed or {}
    where = f"profile {profile}" if profile else "the profile"
    problems: list[str] = []
    unallowed: list[str] = []
    named: list[str] = []
    accounted: dict[str, str] = {}
    protocol = rounds = passed = failed = standin = 0

    def deferred(cname: str, detail: str) -> str:
        """A DEFERRED named with its reason: allowed (the profile's reason) or not."""
        why = detail[-160:] or "no reason given"
        if (leave := allowed.get(cname)) is not None and leave.status == Status.DEFERRED:
            named.append(f"{cname} (DEFERRED: {why}; allowed by {where}: {leave.reason})")
            return f"named: DEFERRED, allowed by {where}: {leave.reason}"
        unallowed.append(f"{cname} (DEFERRED: {why}; not allowed by {where})")
        return f"named: DEFERRED, not allowed by {where}: {detail[:200]}"

    for check in report["checks"]:
        status = check["status"]
        cname = check["name"]
        detail = check.get("detail", "") or ""
        data = check.get("data") or {}
        aspects = {k: (data.get(k) or {}).get("status") for k in ("protocol", "semantic")
                   if isinstance(data.get(k), dict)}
        if aspects:
            how = f"judged: protocol {aspects.get('protocol')}, semantic {aspects.get('semantic')}"
            protocol += aspects.get("protocol") == "PASS"
            semantic = aspects.get("semantic")
            if aspects.get("protocol") in ("FAIL", "ERROR"):
                problems.append(f"{cname}: protocol {aspects['protocol']}")
            if semantic == "PASS":
                passed += 1
            elif semantic == "FAIL":
                failed += 1
                problems.append(f"{cname}: semantic FAIL: {detail[-160:]}")
            elif semantic == "DEFERRED" and STANDIN_REASON in detail:
                standin += 1
                problems.append(f"{cname}: semantic DEFERRED: the model has random weights, "
                                "nothing was judged")
            elif semantic is not None or "DEFERRED" in (status, aspects.get("protocol")):
                how = deferred(cname, detail)   # for another reason (a context limit…)
            accounted[cname] = how
        elif cname.startswith("round-"):
            rounds += 1
            if status != "PASS":
                problems.append(f"{cname}: {status}: {detail[:120]}")
            accounted[cname] = f"judged: load round {status}"
        elif status == "DEFERRED":
            accounted[cname] = deferred(cname, detail)
        elif status in ("FAIL", "ERROR"):
            problems.append(f"{cname}: {status}: {detail[:120]}")
            accounted[cname] = f"judged: {status}"
        else:
            accounted[cname] = f"judged: {status}"
    names = {c["name"]: c["status"] for c in report["checks"]}
    for required in ("engine_start", "controller"):
        if names.get(required) != "PASS":
            problems.append(f"{required}: {names.get(required, 'missing')}")
    if not protocol:
        problems.append("no protocol check ran")
    if not passed + failed:
        problems.append("no semantic verdict was judged")
    if not rounds:
        problems.append("no load round ran (a stand-in run must still complete its load "
                        "rounds)")
    data_out = {"evidence": report.get("evidence"), "accounted": accounted,
                "rounds": rounds, "protocol_pass": protocol, "semantic_pass": passed,
                "semantic_fail": failed, "semantic_deferred": standin,
                "named_deferred": named, "unallowed_deferred": unallowed}
    counts = f"semantic {passed} PASS, {failed} FAIL"
    tail = (f"; allowed DEFERRED, named: {', '.join(named)}" if named else "")
    if problems:
        more = f"; DEFERRED not allowed: {', '.join(unallowed)}" if unallowed else ""
        return CheckResult(name=name, status=Status.FAIL,
                           detail=(f"{counts}; " + "; ".join(problems) + more + tail)[:1600],
                           data=data_out)
    if unallowed:
        return CheckResult(name=name, status=Status.DEFERRED, data=data_out,
                           detail=(f"{counts}, nothing answered wrong, but {len(unallowed)} "
                                   f"check(s) DEFERRED that {where} does not allow: "
                                   f"{', '.join(unallowed)}" + tail)[:1600])
    return CheckResult(name=name, status=Status.PASS, data=data_out,
                       detail=f"engine started and served; protocol PASS on {protocol} "
                              f"check(s), {counts} (answers judged by the profile's cases), "
                              f"{rounds} load round(s) PASS; {len(accounted)} check(s) "
                              "accounted for" + tail)


# ------------------------------------------------------------------ the three actors
#: Who plays which part of the main job, each with its own key and its own evidence store; they
#: share only the registry. CI builds, verifies and attests; the release engineer trusts CI's
#: key and promotes; the operator trusts both and accepts on the cluster; the auditor (no key)
#: trusts all three and renders the reports from an empty store.
ACTORS = ("ci", "release", "operator")
AUDITOR = "auditor"


def key_dir(root: Path, actor: str) -> Path:
    """Where `imagekit keys generate --out-dir` puts an actor's key pair (imagekit.key 0600)."""
    return root / "keys" / actor


def private_key(root: Path, actor: str) -> Path:
    return key_dir(root, actor) / "imagekit.key"


def public_key(root: Path, actor: str) -> Path:
    """The public key an actor hands the others, named after it (`--trust-key ci.pub` names
    the signer `ci` in every reason)."""
    return root / "keys" / f"{actor}.pub"


def store_dir(root: Path, actor: str) -> Path:
    return root / "stores" / actor


def trust_args(root: Path, *actors: str) -> list[str]:
    return [arg for actor in actors for arg in ("--trust-key", str(public_key(root, actor)))]


def sign_args(root: Path, actor: str) -> list[str]:
    return ["--key", str(private_key(root, actor))]
