"""Registry authentication: the `WWW-Authenticate` challenge, Basic, and the Bearer token flow.

The distribution token protocol: a 401 names a realm, a service and the scopes the request
needs; the client asks the realm for a token for those scopes (with Basic credentials when it
has some, anonymously otherwise), then repeats the request with `Authorization: Bearer`.
Tokens are cached per scope set; an identity token is exchanged through the OAuth2
refresh-token grant.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field

_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


@dataclass(frozen=True)
class Challenge:
    scheme: str  # "basic" or "bearer" (lower case)
    params: dict[str, str] = field(default_factory=dict)

    @property
    def realm(self) -> str | None:
        return self.params.get("realm")

    @property
    def service(self) -> str | None:
        return self.params.get("service")

    @property
    def scopes(self) -> list[str]:
        return [s for s in self.params.get("scope", "").split(" ") if s]


def parse_challenges(header: str) -> list[Challenge]:
    """Parse `Bearer realm="…",service="…",scope="…"` (and Basic), several schemes allowed."""
    found: list[Challenge] = []
    for match in re.finditer(r"(?i)\b(basic|bearer)\b", header):
        start = match.end()
        nxt = re.search(r"(?i)(?:^|,)\s*(basic|bearer)\b", header[start:])
        chunk = header[start:start + nxt.start()] if nxt else header[start:]
        params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3))
                  for m in _PARAM.finditer(chunk)}
        found.append(Challenge(match.group(1).lower(), params))
    return found


def basic_header(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def repository_scope(repository: str, actions: str) -> str:
    return f"repository:{repository}:{actions}"


def merge_scopes(*groups: list[str]) -> list[str]:
    """Union of scopes; actions on the same resource are merged (pull + push -> pull,push)."""
    merged: dict[str, list[str]] = {}
    plain: list[str] = []
    for group in groups:
        for scope in group:
            parts = scope.split(":")
            if len(parts) < 3:
                if scope not in plain:
                    plain.append(scope)
                continue
            resource = ":".join(parts[:-1])
            actions = merged.setdefault(resource, [])
            for action in parts[-1].split(","):
                if action and action not in actions:
                    actions.append(action)
    scopes = [f"{resource}:{','.join(sorted(actions))}" for resource, actions in merged.items()]
    return sorted(scopes) + plain
