"""How every BKE process reaches Redis: the URL (with this service's ACL user), TLS, no secret in logs.

`StoreAccess` is what a process needs: a `redis://user:password@host:port/db` URL (each service
has its own ACL user, see bke.runtime.redis_acl) or `rediss://...` for TLS, with the CA that
signed the server's certificate. redis-py takes the CA as `ssl_ca_certs`, and it checks the
server's name against the URL's host by default (`ssl_check_hostname=True` in the pinned
redis-py 8.1, `redis/asyncio/connection.py`, `SSLConnection`).

The password is in the URL, so the URL is never logged as is: `redact_url` replaces it, and
`StoreAccess.__repr__` uses it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.asyncio import Redis

__all__ = ["StoreAccess", "redact_url", "redis_client", "sync_redis_client"]


def redact_url(url: str) -> str:
    """The URL with its password (if any) replaced by `***`: safe to log or print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


@dataclass(frozen=True)
class StoreAccess:
    url: str
    tls_ca: Path | None = None  # CA bundle to verify a `rediss://` server with

    def __repr__(self) -> str:
        return f"StoreAccess({redact_url(self.url)!r})"

    __str__ = __repr__

    def options(self) -> dict[str, Any]:
        """Keyword arguments for `from_url` beyond the URL itself."""
        opts: dict[str, Any] = {}
        if self.url.startswith("rediss://"):
            opts["ssl_cert_reqs"] = "required"
            if self.tls_ca is not None:
                opts["ssl_ca_certs"] = str(self.tls_ca)
        elif self.tls_ca is not None:
            raise ValueError(f"a TLS CA is set but {redact_url(self.url)} is not a rediss:// URL")
        return opts


# A pooled connection that sat idle through a Redis restart is dead. redis-py retries a plain
# command on it, but a pipeline's `execute()` only for the errors named in `retry_on_error`:
# without this, the first pipeline after every outage raised "Connection closed by server" (a
# false second outage, seen in tests/faults/test_cli_follow.py; redis-py 8.1 asyncio/client.py
# `Pipeline._disconnect_raise_reset`). The stale connection never reached the new server, so
# sending again is safe; the same retries redis-py already makes for single commands.
def _retry_options() -> dict[str, Any]:
    from redis.asyncio.retry import Retry
    from redis.backoff import ExponentialWithJitterBackoff
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    return {"retry": Retry(ExponentialWithJitterBackoff(base=0.1, cap=1.0), 3),
            "retry_on_error": [RedisConnectionError, RedisTimeoutError]}


def redis_client(access: StoreAccess | str, **extra: Any) -> Redis:
    """An asyncio client (the services'). Connecting is lazy: nothing happens until first use."""
    access = StoreAccess(access) if isinstance(access, str) else access
    return Redis.from_url(access.url, **access.options(), **{**_retry_options(), **extra})


def sync_redis_client(access: StoreAccess | str, **extra: Any) -> redis.Redis:
    """A blocking client (the lab's probes and the CLI's state tool)."""
    access = StoreAccess(access) if isinstance(access, str) else access
    return redis.Redis.from_url(access.url, **access.options(), **extra)
