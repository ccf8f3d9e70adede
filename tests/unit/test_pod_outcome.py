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


def test_the_refusal_is_one_sentence_for_every_flow() -> None:
    assert PodOutcome(phase="Failed", pod=REFUSED).refusal == (
        "the node refused the Pod (Evicted: Pod was rejected: The node had condition: "
        "[DiskPressure].)")
    assert PodOutcome(phase="Succeeded", pod={"status": {"phase": "Succeeded"}}).refusal is None


def _probe_checks(tmp_path, outcome: PodOutcome):
    """`cluster probe`'s checks of a Pod's outcome, with a run whose Pod left no log."""
    import time
    from types import SimpleNamespace

    from imagekit.cluster.probe import _outcome_checks
    from imagekit.evidence import EvidenceStore
    from imagekit.oci import Digest, ImageReference

    digest = Digest.parse("sha256:" + "ab" * 32)
    run = SimpleNamespace(collect=lambda name, container: SimpleNamespace(events=[], log=""))
    options = SimpleNamespace(timeout_s=60.0)
    with EvidenceStore(tmp_path).attempt(digest, "cluster-probe") as attempt:
        return {c.name: c for c in _outcome_checks(
            run, outcome, options, "p", ImageReference.parse(f"r.example/i@{digest}"),  # type: ignore[arg-type]
            digest, lambda d: b"", attempt, time.monotonic())}


def test_a_refused_pod_defers_the_image_id_and_a_pod_that_never_ran_fails_it(tmp_path) -> None:
    """Refused at admission: nothing was pulled, so the imageID is not judged (DEFERRED, the
    node's words), and the Pod's line is the cluster's ERROR. A Pod that was admitted and whose
    container never started (stuck pulling) still FAILs the imageID."""
    from imagekit.results import Status

    refused = _probe_checks(tmp_path / "refused", PodOutcome(phase="Failed", pod=REFUSED))
    assert refused["pod_completed"].status is Status.ERROR
    assert refused["pod_completed"].detail.startswith("the node refused the Pod (Evicted")
    assert refused["image_id"].status is Status.DEFERRED
    assert refused["image_id"].detail.startswith(
        "the node refused the Pod (Evicted: Pod was rejected: The node had condition: "
        "[DiskPressure].), so no image was pulled")
    stuck = _probe_checks(tmp_path / "stuck", PodOutcome(
        phase="Pending", pod={"status": {"phase": "Pending"}}, stuck_reason="ImagePullBackOff",
        stuck_message="not found"))
    assert stuck["pod_completed"].status is Status.FAIL
    assert stuck["image_id"].status is Status.FAIL
    assert "the container never started" in stuck["image_id"].detail
