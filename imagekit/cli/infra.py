"""`imagekit infra up [--no-cluster] | down | status [--json]`: the local infrastructure, as
root."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from imagekit.cli.app import (
    SUMMARIES,
    SentenceGroup,
    app,
    console,
    guarded,
    print_json,
    progress_for,
    settings,
)
from imagekit.cli.surface import option

if TYPE_CHECKING:  # each command imports what it uses (`imagekit --help` stays fast)
    from rich.table import Table

    from imagekit.infra.state import ComponentStatus

infra_app = typer.Typer(cls=SentenceGroup, help=SUMMARIES["infra"], no_args_is_help=True)
app.add_typer(infra_app, name="infra")


def _components_json(components: list[ComponentStatus]) -> dict:
    return {"components": [c.model_dump(mode="json") for c in components]}


def _table(components: list[ComponentStatus]) -> Table:
    from rich.table import Table

    table = Table("component", "running", "address", "pid", "detail / fix")
    for c in components:
        note = c.detail if c.fix is None else f"{c.detail} → run: {c.fix}"
        table.add_row(c.name, "yes" if c.running else "NO", c.address or "-",
                      str(c.pid) if c.pid else "-", note)
    return table


def _cluster_access(components: list[ComponentStatus]) -> None:
    """Where a running cluster's kubeconfig is, as a line to paste (`imagekit cluster rbac |
    kubectl apply -f -` needs it), and the kubectl to use, or how to get one."""
    import shlex

    cluster = next((c for c in components if c.kubeconfig is not None and c.running), None)
    if cluster is None:
        return
    console.print(f"kubeconfig: {cluster.kubeconfig}", markup=False)
    console.print(f"export KUBECONFIG={shlex.quote(str(cluster.kubeconfig))}", markup=False)
    if cluster.kubectl is not None:
        console.print(f"kubectl: {cluster.kubectl}", markup=False)
    else:  # the cluster's build makes no kubectl; Debian ships the same version
        console.print("kubectl: not found; Debian's kubernetes-client package is the cluster's "
                      "version (1.20): apt-get install kubernetes-client", markup=False)


@infra_app.command("up")
@guarded
def up(cluster: bool = option("--cluster"), json_output: bool = option("--json")) -> None:
    """Install and start only what is missing (idempotent)."""
    from imagekit.infra import manager
    from imagekit.infra.state import StatePaths

    with progress_for(json_output):
        state, components = manager.up(cluster=cluster, paths=StatePaths(settings().state_dir),
                                       k8s_bin=settings().k8s_bin,
                                       mirror=settings().debian_mirror)
    if json_output:
        print_json({**_components_json(components), "state": state.model_dump(mode="json")})
        return
    console.print(_table(components))
    console.print(f"state: {state.state_dir / 'state.json'}   "
                  f"credentials: DOCKER_CONFIG={state.docker_config_dir}")
    _cluster_access(components)


@infra_app.command("down")
@guarded
def down(cluster: bool = option("--cluster"), json_output: bool = option("--json")) -> None:
    """Stop only the processes imagekit started (verified by PID and start time)."""
    from imagekit.infra import manager
    from imagekit.infra.state import StatePaths

    stopped = manager.down(cluster=cluster, paths=StatePaths(settings().state_dir),
                           k8s_bin=settings().k8s_bin)
    if json_output:
        print_json({"stopped": stopped})
        return
    console.print("stopped: " + (", ".join(stopped) if stopped else "nothing (none of ours ran)"))


@infra_app.command("status")
@guarded
def status(json_output: bool = option("--json")) -> None:
    """What runs, where, and for anything missing the command that fixes it."""
    from imagekit.infra import manager
    from imagekit.infra.state import StatePaths

    components = manager.status(paths=StatePaths(settings().state_dir),
                                k8s_bin=settings().k8s_bin)
    if json_output:
        print_json(_components_json(components))
        return
    console.print(_table(components))
    _cluster_access(components)
