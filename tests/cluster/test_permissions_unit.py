"""`cluster rbac`'s objects, the permissions table behind them and the Pod Security judgement,
without a cluster (the real API server's answers: test_operator_real.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from imagekit.cluster import permissions, podsecurity
from imagekit.errors import InvalidInput

REPO = Path(__file__).resolve().parents[2]
READ_ONLY = {"get", "list", "watch"}


def test_the_role_holds_the_namespaced_rows_and_the_cluster_role_only_reads() -> None:
    objects = permissions.rbac_objects("team-a")
    kinds = [o["kind"] for o in objects]
    assert kinds == ["Namespace", "ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                     "ClusterRoleBinding"]
    by_kind = {o["kind"]: o for o in objects}
    assert by_kind["Namespace"]["metadata"]["labels"][permissions.ENFORCE_LABEL] == "restricted"
    role_rules = by_kind["Role"]["rules"]
    granted = {(g, r, v) for rule in role_rules for g in rule["apiGroups"]
               for r in rule["resources"] for v in rule["verbs"]}
    assert ("", "pods", "delete") in granted and ("batch", "jobs", "create") in granted
    assert ("", "namespaces", "get") in granted
    namespaces_rule = next(r for r in role_rules if r["resources"] == ["namespaces"])
    assert namespaces_rule["resourceNames"] == ["team-a"]   # its own namespace only
    cluster_rules = by_kind["ClusterRole"]["rules"]
    cluster = {r for rule in cluster_rules for r in rule["resources"]}
    assert cluster == {"nodes", "pods", "priorityclasses", "persistentvolumes", "csinodes"}
    assert all(set(rule["verbs"]) <= READ_ONLY for rule in cluster_rules)
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        assert by_kind[binding]["subjects"] == [{"kind": "ServiceAccount", "name": "imagekit",
                                                 "namespace": "team-a"}]
    # nothing in the table writes a cluster-scoped object
    assert all(set(p.verbs) <= READ_ONLY for p in permissions.PERMISSIONS if p.cluster)


def test_one_command_gets_only_its_rows() -> None:
    objects = permissions.rbac_objects("team-a", commands=("probe",), with_namespace=False)
    assert [o["kind"] for o in objects] == ["ServiceAccount", "Role", "RoleBinding"]
    resources = {r for rule in objects[1]["rules"] for r in rule["resources"]}
    assert resources == {"namespaces", "pods", "pods/log", "events", "configmaps", "secrets"}
    needed = {str(a) for a in permissions.needed("probe", "team-a")}
    assert "delete pods in namespace team-a" in needed and "get pods/log in namespace " \
        "team-a" in needed
    assert "list nodes (cluster-wide)" in {str(a) for a in permissions.needed("accept", "x")}


@pytest.mark.parametrize(("args", "says"), [
    (["--namespace", "Team_A"], "--namespace must be a DNS-1123 label"),
    (["--service-account", "a/b"], "--service-account must be a DNS-1123 label"),
    (["--pod-security", "strict"], "--pod-security must be one of"),
    (["--command", "promote"], "--command must be one of"),
])
def test_cluster_rbac_refuses_bad_input_in_one_line(args: list[str], says: str) -> None:
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "rbac", *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr


def test_the_rbac_reference_page_is_the_table() -> None:
    page = (REPO / "docs" / "reference" / "rbac.md").read_text()
    assert permissions.reference_table() in page, "regenerate docs/reference/rbac.md's table"


# ---------------------------------------------------------------------------- Pod Security
# (each control, every rendered Pod, and checkov's verdict: test_podsecurity_*.py)

def test_require_names_the_field_and_the_level_in_one_line() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "x"},
           "spec": {"hostPID": True, "containers": [{"name": "c"}]}}
    with pytest.raises(InvalidInput) as caught:
        podsecurity.require([pod], "baseline", "team-a")
    line = caught.value.one_line()
    assert "namespace team-a enforces Pod Security level 'baseline'" in line
    assert "spec.hostPID must be unset or false [baseline: Host Namespaces]" in line
    assert "\n" not in line
    podsecurity.require([pod], "privileged", "team-a")       # privileged admits anything
    with pytest.raises(InvalidInput, match="is not a Pod Security level"):
        podsecurity.level("strict", "namespace team-a")
    assert podsecurity.level(None, "namespace team-a") == "privileged"
