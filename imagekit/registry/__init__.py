"""OCI distribution transport: one `RegistryClient` per registry host, verified reads."""

import sys

# httpx's package imports its own command-line client (`httpx._main`: click, rich, pygments)
# whenever those are installed — ~50 ms of CPU in every imagekit process that talks to a
# registry, where `--json` output needs no rich at all. A None entry in sys.modules makes that
# import fail the documented way, and httpx falls back to its stub `main` (the httpx CLI is never
# run inside imagekit). No effect once httpx was imported by someone else.
if "httpx" not in sys.modules:
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

from imagekit.registry.client import ManifestBlob, RegistryClient, RegistryOptions
from imagekit.registry.credentials import Credential, CredentialSource
from imagekit.registry.pool import ClientPool
from imagekit.registry.retry import RetryPolicy

__all__ = ["ClientPool", "Credential", "CredentialSource", "ManifestBlob", "RegistryClient",
           "RegistryOptions", "RetryPolicy"]
