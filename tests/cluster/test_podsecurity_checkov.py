"""checkov, the independent checker, judges every Pod imagekit renders and one hostile Pod per
control, and must agree with imagekit's own judgement (`podsecurity`): no Pod of imagekit's fails
a check mapped to the standard, and every hostile Pod of a control checkov covers fails exactly
the checks expected of it. One checkov process judges them all (JSON out); it is installed into
its own venv on first use (pss.checker)."""

from __future__ import annotations

import pytest

from imagekit.cluster import podsecurity

from . import pss

pytestmark = [pytest.mark.checker, pytest.mark.timeout(1200)]

REPO = pss.REPO


@pytest.fixture(scope="module")
def verdicts(checkov, tmp_path_factory) -> dict[str, pss.Verdict]:
    objects = dict(pss.product_pods())
    objects.update({f"hostile-{h.name}": h.pod for h in pss.hostile_pods()})
    return pss.judge(checkov, objects, tmp_path_factory.mktemp("pss-manifests"))


@pytest.mark.parametrize("name", sorted(pss.product_pods()))
def test_both_admit_every_pod_imagekit_renders(verdicts, name: str) -> None:
    assert podsecurity.violations(pss.product_pods()[name], "restricted") == []
    assert verdicts[name].failed == set()
    assert verdicts[name].passed == set(pss.MAPPED_CHECKS)     # each check did look at it


HOSTILE = pss.hostile_pods()


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_both_refuse_each_hostile_pod(verdicts, hostile: pss.Hostile) -> None:
    assert set(podsecurity.broken_controls(hostile.pod)) == hostile.broken
    failed = verdicts[f"hostile-{hostile.name}"].failed
    assert failed == hostile.checkov
    mapped = set(pss.CHECKOV_MAP[hostile.control])
    if mapped and not hostile.unseen_by_checkov:   # a control checkov covers: it refuses too
        assert failed & mapped, (hostile.name, sorted(failed))
    else:              # a control (or a place) checkov lacks: judged by imagekit alone
        assert failed == set()


def test_the_design_page_shows_the_mapping() -> None:
    page = (REPO / "docs" / "design" / "cluster.md").read_text()
    assert pss.docs_table() in page, "regenerate docs/design/cluster.md's Pod Security table"


def test_the_real_cluster_tests_check_fails_when_checkov_alone_refuses(checkov, tmp_path) -> None:
    """`assert_both_admit` (what the real-cluster tests call on the Pods the server stored): a
    Pod as a list returns it (no kind) is judged; one the standard admits but checkov refuses
    (an added NET_BIND_SERVICE, which CKV_K8S_25 fails) makes it fail, naming checkov."""
    listed = pss.compliant()
    del listed["kind"], listed["apiVersion"]
    pss.assert_both_admit(checkov, {"listed": listed}, tmp_path / "a")
    stricter = pss.compliant()
    stricter["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] = [
        "NET_BIND_SERVICE"]
    assert podsecurity.violations(stricter, "restricted") == []
    with pytest.raises(AssertionError, match="checkov disagrees.*CKV_K8S_25"):
        pss.assert_both_admit(checkov, {"stricter": stricter}, tmp_path / "b")
