"""Cluster flows above the Kubernetes transport (`imagekit.kube`): Pod lifecycle done safely
(`pods`), one run's Pods from creation to cleanup (`podrun`), template rendering
(`manifests`), imageID verification (`imageid`), the probe Pod (`probe`), the GPU pre-check
(`precheck`), the preflight Pod (`preflight`), GPU jobs (`gpujob`), model volumes
(`modelvolume`), and manifests checked against the Kubernetes 1.37 API's models
(`apimodels`)."""

from imagekit.kube import AdmissionRefused, Conflict, Kube

__all__ = ["AdmissionRefused", "Conflict", "Kube"]
