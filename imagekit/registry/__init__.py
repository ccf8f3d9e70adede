"""OCI distribution transport: one `RegistryClient` per registry host, verified reads.

No import tricks here: httpx's package imports its own command-line client (`httpx._main`),
whose first import is `click`. typer >= 0.2x vendors click, so a user's install has no click and
that import fails the documented way at once (httpx falls back to its stub `main`): measured,
`import httpx` costs the same CPU as it did with the old `sys.modules["httpx._main"]` stub
(0.12 s vs 0.13 s, min of 15). Only an environment that installs click for something else (the
test extra's uvicorn) pays for rich and pygments there (+0.07 s).
"""

from imagekit.registry.client import ManifestBlob, RegistryClient, RegistryOptions
from imagekit.registry.credentials import Credential, CredentialSource
from imagekit.registry.pool import ClientPool
from imagekit.registry.retry import RetryPolicy

__all__ = ["ClientPool", "Credential", "CredentialSource", "ManifestBlob", "RegistryClient",
           "RegistryOptions", "RetryPolicy"]
