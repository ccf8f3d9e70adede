"""The Kubernetes transport: the one place that knows API paths, resources and credentials.

- `client`: `Kube` (a connection) and `Resource` (one kind, found by discovery).
- `discovery`: kind → plural and scope, from the server's resource lists, cached per run.
- `watch`: waits as list → watch from its resourceVersion → re-list on 410, with a deadline.
- `errors`: API statuses as typed errors.
- `kubeconfig`, `kubeauth`: the kubeconfig as client-go reads it; credentials that renew.
- `incluster`: where a connection comes from without one (a Pod's ServiceAccount).

Flows (`imagekit.cluster`, `imagekit.clusteraccept`, `imagekit.gpu`) sit above and never build
an API path (tests/unit/test_kube_layering.py).
"""

from imagekit.kube.client import Kube, Resource, WatchEvent, default_kubeconfig
from imagekit.kube.errors import AdmissionRefused, Conflict, Gone, UnknownResource, WaitTimeout

__all__ = ["AdmissionRefused", "Conflict", "Gone", "Kube", "Resource", "UnknownResource",
           "WaitTimeout", "WatchEvent", "default_kubeconfig"]
