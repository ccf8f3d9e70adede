"""Cluster flows above the Kubernetes transport (`imagekit.kube`): Pod lifecycle done safely
(`pods`), one run's Pods from creation to cleanup (`podrun`), template rendering
(`manifests`), imageID verification (`imageid`), the probe Pod (`probe`), the GPU pre-check
(`precheck`), the preflight Pod (`preflight`), GPU jobs (`gpujob`) and model volumes
(`modelvolume`)."""

from imagekit.kube import AdmissionRefused, Conflict, Kube

__all__ = ["AdmissionRefused", "Conflict", "Kube"]
