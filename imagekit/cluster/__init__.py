"""Kubernetes transport (`kube`) and the cluster operations built directly on it: Pod lifecycle
done safely (`pods`), template rendering (`manifests`), imageID verification (`imageid`), the
probe Pod (`probe`) and the GPU pre-check (`precheck`)."""

from imagekit.cluster.kube import AdmissionRefused, Conflict, Kube

__all__ = ["AdmissionRefused", "Conflict", "Kube"]
