"""The names the CLI imports from here; the transport itself is `imagekit.kube`."""

from imagekit.kube.client import Kube, Resource, default_kubeconfig
from imagekit.kube.errors import AdmissionRefused, Conflict, TransportError, WaitTimeout

__all__ = ["AdmissionRefused", "Conflict", "Kube", "Resource", "TransportError", "WaitTimeout",
           "default_kubeconfig"]
