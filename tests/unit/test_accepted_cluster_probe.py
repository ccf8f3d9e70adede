"""A spec acceptance names a probe; the cluster probe reports that probe as `probe:<name>`."""

from imagekit.report.accepted import Accepted, match
from imagekit.results import Status

ACCEPT = [Accepted(check="torch_arch", status=Status.FAIL, reason="CPU stand-in, no sm_90",
                   source="test")]


def test_cluster_probe_in_pod_probe_is_matched_by_its_probe_name() -> None:
    assert match("cluster-probe", "probe:torch_arch", Status.FAIL, ACCEPT) is ACCEPT[0]
    assert match("probe", "torch_arch", Status.FAIL, ACCEPT) is ACCEPT[0]


def test_only_the_named_probe_and_exact_status_are_accepted() -> None:
    assert match("cluster-probe", "image_id", Status.FAIL, ACCEPT) is None
    assert match("cluster-probe", "probe:torch_arch", Status.ERROR, ACCEPT) is None
    assert match("build", "torch_arch", Status.FAIL, ACCEPT) is None
