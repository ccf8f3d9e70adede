"""What the local v1.20 API server cannot show, shown against it: a dry run (nothing is
stored) of each manifest the 1.37 model check refuses is accepted without a word, and the
field is not in what the server would store; the same manifests without the field pass the
check. This is why the check exists (imagekit/cluster/apimodels.py): only the models tell
that the field was misspelled, removed, or newer than this server."""

from __future__ import annotations

import copy

import pytest

from imagekit.cluster.apimodels import check_manifest

pytestmark = pytest.mark.cluster


def _pod(namespace: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "apimodels-dry-run", "namespace": namespace},
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "registry.invalid/dry-run@sha256:" + "0" * 64,
                 "securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}]}}


def test_a_misspelled_field_is_dropped_by_the_server_and_named_by_the_check(kube, test_ns):
    pod = _pod(test_ns)
    assert check_manifest(pod) == []
    bad = copy.deepcopy(pod)
    bad["spec"]["containers"][0]["securityContext"] = {"runAsNonRot": True}
    stored = kube.create(bad, dry_run=True)            # accepted: no error, no warning
    assert stored["spec"]["containers"][0].get("securityContext", {}) == {}
    assert check_manifest(bad) == [
        "spec.containers[0].securityContext.runAsNonRot: unknown field "
        "(did you mean runAsNonRoot?)"]


def test_fields_removed_since_are_dropped_quietly_and_named_by_the_check(kube, test_ns):
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": "apimodels-dry-run", "namespace": test_ns,
                            "clusterName": "east"},              # removed in 1.25
               "spec": {"selector": {"a": "b"}, "ports": [{"port": 80, "targetPort": 8000}],
                        "topologyKeys": ["kubernetes.io/hostname", "*"]}}  # removed in 1.22
    stored = kube.create(service, dry_run=True)        # v1.20 serves both fields
    assert "clusterName" not in stored["metadata"] and "topologyKeys" not in stored["spec"]
    assert check_manifest(service) == ["metadata.clusterName: unknown field",
                                       "spec.topologyKeys: unknown field"]
    del service["spec"]["topologyKeys"], service["metadata"]["clusterName"]
    assert check_manifest(service) == []


def test_an_indexed_job_passes_the_check_while_this_server_drops_its_mode(kube, test_ns):
    from imagekit.cluster.gpujob import MODE_INDEXED, GpuJobOptions, render
    from imagekit.oci import ImageReference

    options = GpuJobOptions(nodes=1, gpus_per_node=0, namespace=test_ns)
    rendered = render(ImageReference.parse("registry.invalid/x@sha256:" + "0" * 64), options,
                      "apimodels-dry-run", MODE_INDEXED)
    [job] = rendered.jobs
    assert check_manifest(job) == []
    stored = kube.create(job, dry_run=True)
    assert job["spec"]["completionMode"] == "Indexed"
    assert "completionMode" not in stored["spec"]      # 1.21+ (alpha), default on in 1.22


def test_a_users_probe_template_that_does_not_fit_leaves_nothing_behind(
        kube, test_ns, python_image, tmp_path):
    """`cluster probe` with the user's templates (`$IMAGEKIT_MANIFESTS_DIR`) whose Pod has a
    misspelled field: one line naming the field, exit 2, and the run's Secret and ConfigMap
    (created before the Pod is rendered) are gone; no Pod was created."""
    import os
    import shutil
    import subprocess
    import sys

    from imagekit import packaged

    mine = tmp_path / "manifests"
    shutil.copytree(packaged.path("manifests"), mine)
    template = mine / "probe-pod.yaml.j2"
    text = template.read_text()
    assert "  restartPolicy: Never\n" in text
    template.write_text(text.replace("  restartPolicy: Never\n",
                                     "  restartPolicy: Never\n  schedulerNmae: x\n"))
    env = {**os.environ, "IMAGEKIT_MANIFESTS_DIR": str(mine),
           "IMAGEKIT_EVIDENCE_DIR": str(tmp_path / "evidence")}
    done = subprocess.run([sys.executable, "-m", "imagekit", "cluster", "probe",
                           str(python_image.reference), "--namespace", test_ns],
                          capture_output=True, text=True, env=env, timeout=240, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("imagekit: error: Pod probe-") and line.endswith(f"({template})")
    assert "spec.schedulerNmae: unknown field (did you mean schedulerName?)" in line
    for kind in ("Pod", "ConfigMap", "Secret"):
        left = [o["metadata"]["name"] for o in kube.resource(kind).list(test_ns)
                if o["metadata"]["name"].startswith("probe-")]
        assert left == [], (kind, left)
