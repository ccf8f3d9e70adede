"""Local infrastructure imagekit starts itself: Docker engine, loopback registries, token
service, and (through `imagekit.infra.cluster`) a single-node Kubernetes cluster.

Read the recorded layout with `imagekit.infra.state.load_state()`; start/stop with
`imagekit.infra.manager` (or `imagekit infra up|down|status`).
"""

from imagekit.infra.state import (
                                  ComponentStatus,
                                  InfraState,
                                  RegistryEndpoint,
                                  load_state,
                                  registry_env,
)

__all__ = ["ComponentStatus", "InfraState", "RegistryEndpoint", "load_state", "registry_env"]
