"""How every BKE process reaches Redis: the URL (with this service's ACL user), TLS, no secret in logs.

`StoreAccess` is what a process needs: a `redis://user:password@host:port/db` URL (each service
has its own ACL user, see bke.adapters.runtime.redis_acl) or `rediss://...` for TLS, with the CA that
signed the server's certificate. redis-py takes the CA as `ssl_ca_certs`, and it checks the
server's name against the URL's host by default (`ssl_check_hostname=True` in the pinned
redis-py 8.1, `redis/asyncio/connection.py`, `SSLConnection`).

The password is in the URL, so the URL is never logged as is: `redact_url` replaces it, and
`StoreAccess.__repr__` uses it.

Redis with replication and Sentinel: `StoreAccess.sentinels` (`host:port` pairs) and
`sentinel_master` (the name the sentinels monitor the primary by). The client then asks the
sentinels where the primary is on every new connection (redis-py's `SentinelConnectionPool`), so
after a failover it reaches the new primary by itself. In the failover window every command fails
with a ConnectionError: the old primary is gone (refused), or it was demoted and answers READONLY
(which redis-py's sentinel connection turns into a ConnectionError and a reconnect), or no
sentinel knows a primary yet (MasterNotFoundError, a ConnectionError too). bke.core.errors.is_unavailable
counts them all as an outage, so a message is held, not failed, until the new primary answers.
The URL still carries the user, password and db; its host and port are not used. The sentinels
are reached without TLS or a password (they hold no data; see the README for what is not done).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import redis
from redis.asyncio import Redis

__all__ = ["StoreAccess", "parse_sentinels", "store_access_from_env", "redact_url", "redis_client", "sync_redis_client"]


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


def parse_sentinels(text: str) -> tuple[tuple[str, int], ...]:
    """`BKE_REDIS_SENTINELS` (`host:port,host:port,...`; `[v6]:port` for IPv6) as pairs, or a
    ValueError that names the variable and the entry at fault."""
    out = []
    entries = [e.strip() for e in text.split(",")]
    for i, entry in enumerate(entries, 1):
        where = f"BKE_REDIS_SENTINELS: entry {i} ({entry!r})"
        host, sep, port = entry.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not entry or not sep or not host:
            raise ValueError(f"{where} is not host:port")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{where}: the port must be a number from 1 to 65535")
        out.append((host, int(port)))
    return tuple(out)


@dataclass(frozen=True)
class StoreAccess:
    url: str
    tls_ca: Path | None = None  # CA bundle to verify a `rediss://` server with
    sentinels: tuple[tuple[str, int], ...] = ()  # empty: the URL's server itself
    sentinel_master: str | None = None  # the name the sentinels monitor the primary by

    def __post_init__(self) -> None:
        if bool(self.sentinels) != bool(self.sentinel_master):
            raise ValueError("Redis Sentinel needs both the sentinels and the master's name")

    def __repr__(self) -> str:
        if self.sentinels:
            where = ",".join(f"{h}:{p}" for h, p in self.sentinels)
            return f"StoreAccess({redact_url(self.url)!r}, sentinels={where!r}, master={self.sentinel_master!r})"
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


def store_access_from_env(environ: Mapping[str, str], user: str) -> StoreAccess:
    """Redis access from the services' variables (BKE_REDIS_URL, BKE_REDIS_TLS_CA,
    BKE_REDIS_SENTINELS, BKE_REDIS_SENTINEL_MASTER); ValueError naming what is wrong. `user`
    says whose URL BKE_REDIS_URL must be, for that message."""
    url = environ.get("BKE_REDIS_URL")
    if not url:
        raise ValueError(f"BKE_REDIS_URL: required (the {user} Redis user's URL)")
    ca, sentinels = environ.get("BKE_REDIS_TLS_CA"), environ.get("BKE_REDIS_SENTINELS")
    return StoreAccess(url, Path(ca) if ca else None, parse_sentinels(sentinels) if sentinels else (),
                       environ.get("BKE_REDIS_SENTINEL_MASTER") or None)


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


def _sentinel_kwargs(access: StoreAccess) -> dict[str, Any]:
    """What `from_url` would take from the URL (user, password, db) and the TLS options, as
    connection keywords for the primary that the sentinels name."""
    parts = urlsplit(access.url)
    opts: dict[str, Any] = {}
    if parts.username:
        opts["username"] = unquote(parts.username)
    if parts.password is not None:
        opts["password"] = unquote(parts.password)
    db = parts.path.strip("/")
    if db:
        opts["db"] = int(db)
    tls = access.options()
    if tls:
        opts["ssl"] = True
        opts.update(tls)
    return opts


def redis_client(access: StoreAccess | str, **extra: Any) -> Redis:
    """An asyncio client (the services'). Connecting is lazy: nothing happens until first use."""
    access = StoreAccess(access) if isinstance(access, str) else access
    if access.sentinels:
        from redis.asyncio.sentinel import Sentinel

        kwargs = {**_sentinel_kwargs(access), **_retry_options(), **extra}
        sentinel = Sentinel(access.sentinels, sentinel_kwargs=_sentinel_socket(extra), **kwargs)
        return sentinel.master_for(str(access.sentinel_master), redis_class=Redis, **kwargs)
    return Redis.from_url(access.url, **access.options(), **{**_retry_options(), **extra})


def sync_redis_client(access: StoreAccess | str, **extra: Any) -> redis.Redis:
    """A blocking client (the lab's probes and the CLI's state tool)."""
    access = StoreAccess(access) if isinstance(access, str) else access
    if access.sentinels:
        from redis.sentinel import Sentinel as SyncSentinel

        kwargs = {**_sentinel_kwargs(access), **extra}
        sentinel = SyncSentinel(access.sentinels, sentinel_kwargs=_sentinel_socket(extra), **kwargs)
        return sentinel.master_for(str(access.sentinel_master), redis_class=redis.Redis, **kwargs)
    return redis.Redis.from_url(access.url, **access.options(), **extra)


def _sentinel_socket(extra: dict[str, Any]) -> dict[str, Any]:
    # The sentinels get the caller's socket timeouts (a probe's short ones) and nothing else: no
    # password of the primary's user is sent to them. Without a timeout, one sentinel that hangs
    # would hold every reconnect; 2 s is far above a sentinel's answer on a live network.
    return {"socket_timeout": 2.0, "socket_connect_timeout": 2.0,
            **{k: v for k, v in extra.items() if k.startswith("socket_")}}
