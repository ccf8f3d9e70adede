"""imagekit's own Pod Security judgement (`podsecurity`), control by control, without a cluster:
every Pod imagekit renders meets restricted; one hostile Pod per control is named with that
control; the values the standard allows pass. checkov's verdict on the same Pods:
test_podsecurity_checkov.py."""

from __future__ import annotations

import copy

import pytest

from imagekit.cluster import manifests, podsecurity

from . import pss

HOSTILE = pss.hostile_pods()


def test_the_controls_are_the_standards_and_each_has_a_hostile_pod() -> None:
    keys = [c.key for c in podsecurity.CONTROLS]
    assert len(keys) == 18 and len(set(keys)) == 18
    assert keys == list(pss.CHECKOV_MAP)
    assert {h.control for h in HOSTILE} == set(keys)


@pytest.mark.parametrize("name", sorted(pss.product_pods()))
def test_every_pod_imagekit_renders_meets_restricted(name: str) -> None:
    pod = pss.product_pods()[name]
    assert podsecurity.violations(pod, "restricted") == []
    assert podsecurity.meets(pod) == "restricted"
    spec, _ = podsecurity.pod_spec(pod)
    assert spec["securityContext"]["runAsUser"] == manifests.RUN_AS_USER != 0


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.name for h in HOSTILE])
def test_each_hostile_pod_is_named_with_its_control(hostile: pss.Hostile) -> None:
    assert set(podsecurity.broken_controls(hostile.pod, "restricted")) == hostile.broken
    level = hostile.control.split(":")[0]
    expected = "baseline" if level == "restricted" else "privileged"
    assert podsecurity.meets(hostile.pod) == expected
    if level == "restricted":       # baseline does not look at it
        assert podsecurity.violations(hostile.pod, "baseline") == []
    assert podsecurity.violations(hostile.pod, "privileged") == []


def test_the_fields_named_are_where_the_break_is() -> None:
    by_name = {h.name: h for h in HOSTILE}

    def fields(name: str) -> list[str]:
        return [v.field for v in podsecurity.violations(by_name[name].pod, "restricted")]

    assert fields("apparmor-annotation") == [
        "metadata.annotations[container.apparmor.security.beta.kubernetes.io/probe]"]
    assert fields("apparmor-pod-profile") == ["spec.securityContext.appArmorProfile.type"]
    assert fields("selinux-user-role") == [
        "spec.containers[0].securityContext.seLinuxOptions.user",
        "spec.containers[0].securityContext.seLinuxOptions.role"]
    assert fields("proc-mount-ephemeral-container") == [
        "spec.ephemeralContainers[0].securityContext.procMount"]
    assert fields("privileged-init-container") == [
        "spec.initContainers[0].securityContext.privileged"]
    assert fields("host-lifecycle-init-container") == [
        "spec.initContainers[0].lifecycle.preStop.httpGet.host"]
    assert fields("sysctl") == ["spec.securityContext.sysctls[0].name"]
    assert fields("privileged-job") == [
        "spec.template.spec.containers[0].securityContext.privileged"]


def test_a_jobs_template_annotations_are_read_for_apparmor() -> None:
    job = copy.deepcopy(pss.product_pods()["gpujob-per-index-0"])
    job["spec"]["template"].setdefault("metadata", {}).setdefault("annotations", {})[
        "container.apparmor.security.beta.kubernetes.io/preflight"] = "unconfined"
    [found] = podsecurity.violations(job, "baseline")
    assert found.field.startswith("spec.template.metadata.annotations[")
    assert found.control == "baseline: AppArmor"


ALLOWED = {
    "seccomp Localhost": lambda s, c: s["securityContext"].update(
        seccompProfile={"type": "Localhost", "localhostProfile": "p.json"}),
    "apparmor RuntimeDefault": lambda s, c: c["securityContext"].update(
        appArmorProfile={"type": "RuntimeDefault"}),
    "apparmor Localhost": lambda s, c: s["securityContext"].update(
        appArmorProfile={"type": "Localhost", "localhostProfile": "k8s-default"}),
    "selinux container_t and a level": lambda s, c: s["securityContext"].update(
        seLinuxOptions={"type": "container_t", "level": "s0:c123,c456"}),
    "selinux container_engine_t": lambda s, c: c["securityContext"].update(
        seLinuxOptions={"type": "container_engine_t"}),
    "a safe sysctl": lambda s, c: s["securityContext"].update(
        sysctls=[{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]),
    "hostPort 0": lambda s, c: c.update(ports=[{"containerPort": 80, "hostPort": 0}]),
    "procMount Default": lambda s, c: c["securityContext"].update(procMount="Default"),
    "add NET_BIND_SERVICE": lambda s, c: c["securityContext"]["capabilities"].update(
        add=["NET_BIND_SERVICE"]),
    "runAsNonRoot on the container only": lambda s, c: [
        s["securityContext"].pop("runAsNonRoot"), c["securityContext"].update(
            runAsNonRoot=True)],
    "seccomp on the container only": lambda s, c: [
        s["securityContext"].pop("seccompProfile"), c["securityContext"].update(
            seccompProfile={"type": "RuntimeDefault"})],
    "a probe on the Pod's own address": lambda s, c: c.update(readinessProbe={
        "httpGet": {"host": "", "path": "/", "port": 80}}),
    "a csi and an ephemeral volume": lambda s, c: s["volumes"].extend([
        {"name": "a", "csi": {"driver": "x"}}, {"name": "b", "ephemeral": {}}]),
    "root in its own user namespace": lambda s, c: s.update(hostUsers=False) or s[
        "securityContext"].update(runAsNonRoot=False, runAsUser=0),
    "a Windows Pod keeps its capabilities": lambda s, c: s.update(os={"name": "windows"}) or [
        c["securityContext"].pop("capabilities"), s["securityContext"].pop("seccompProfile"),
        c["securityContext"].pop("allowPrivilegeEscalation")],
}


@pytest.mark.parametrize("case", sorted(ALLOWED))
def test_values_the_standard_allows_pass(case: str) -> None:
    pod = pss.compliant()
    ALLOWED[case](pod["spec"], pod["spec"]["containers"][0])
    assert podsecurity.violations(pod, "restricted") == [], case


def test_an_explicit_false_beside_a_true_is_still_a_break() -> None:
    """A container's runAsNonRoot: true does not cover the Pod's explicit false, nor a
    container's RuntimeDefault the Pod's Unconfined (admission reads both)."""
    pod = pss.compliant()
    pod["spec"]["securityContext"]["runAsNonRoot"] = False
    pod["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = True
    assert [v.field for v in podsecurity.violations(pod, "restricted")] == [
        "spec.securityContext.runAsNonRoot"]
