"""A Pod the kubelet refused at admission is the cluster's fault, reported in the node's words."""
from imagekit.cluster.pods import PodOutcome

# What a kubelet under DiskPressure wrote on a Pod it refused (status copied from a real node).
REFUSED = {"status": {"phase": "Failed", "reason": "Evicted",
                      "message": "Pod was rejected: The node had condition: [DiskPressure]. "}}


def test_a_pod_refused_at_admission_says_why() -> None:
    outcome = PodOutcome(phase="Failed", pod=REFUSED)
    assert outcome.refused == "Evicted: Pod was rejected: The node had condition: [DiskPressure]."


def test_a_pod_whose_container_ran_and_failed_is_not_a_refusal() -> None:
    ran = {"status": {"phase": "Failed", "reason": "Error",
                      "containerStatuses": [{"state": {"terminated": {"exitCode": 1}}}]}}
    assert PodOutcome(phase="Failed", pod=ran).refused is None
    assert PodOutcome(phase="Succeeded", pod={"status": {"phase": "Succeeded"}}).refused is None
    assert PodOutcome(phase="Failed", pod={"status": {"phase": "Failed"}}).refused is None
