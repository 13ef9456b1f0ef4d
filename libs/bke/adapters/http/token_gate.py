"""A dashboard reachable beyond the machine asks for a bearer token.

Why: the services' HTTP sides (dashboards, /metrics, the JSON views) showed every cluster's nodes,
phases and events to anyone who could reach the port, and containers bind 0.0.0.0. Now a service
whose HTTP host is not a loopback address refuses to start without a token
(`BKE_HTTP_TOKEN_FILE`), and with one every request but the probes must carry
`Authorization: Bearer <token>` (Prometheus' `authorization` / `bearer_token_file`). /healthz and
/readyz stay open: the kubelet and Docker probe them without credentials, and they say only
whether the service is up and why not.
"""
from __future__ import annotations

import hmac
import ipaddress
from pathlib import Path
from typing import Any

from bke.core.errors import PermanentError

__all__ = ["OPEN_PATHS", "ExposedWithoutToken", "TokenGate", "is_loopback", "read_token"]

OPEN_PATHS = frozenset({"/healthz", "/readyz"})


class ExposedWithoutToken(PermanentError):
    pass


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: Path | None, host: str) -> str | None:
    """The token from its file (None: no file given). A host beyond loopback needs one."""
    if path is None:
        if not is_loopback(host):
            raise ExposedWithoutToken(f"BKE_HTTP_HOST={host} exposes the dashboard beyond this machine: give it a "
                                      "bearer token with BKE_HTTP_TOKEN_FILE (or bind 127.0.0.1)")
        return None
    token = path.read_text().strip()
    if len(token) < 16:
        raise ExposedWithoutToken(f"BKE_HTTP_TOKEN_FILE={path}: a token of at least 16 characters")
    return token


class TokenGate:
    """ASGI middleware: 401 for a request without the bearer token, except OPEN_PATHS."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"text/plain"), (b"www-authenticate", b'Bearer realm="bke"')]})
        await send({"type": "http.response.body", "body": b"a bearer token is required\n"})
