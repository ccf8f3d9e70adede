"""OCI distribution transport: one `RegistryClient` per registry host, verified reads."""

from imagekit.registry.client import ManifestBlob, RegistryClient, RegistryOptions
from imagekit.registry.credentials import Credential, CredentialSource
from imagekit.registry.pool import ClientPool
from imagekit.registry.retry import RetryPolicy

__all__ = ["ClientPool", "Credential", "CredentialSource", "ManifestBlob", "RegistryClient",
           "RegistryOptions", "RetryPolicy"]
