"""Run a real etcd and talk to it over client mTLS, without an etcd client library.

Tests and the lab use this to prove that the certificates we issue actually work against etcd:
a health check and a put/get through the v3 gRPC-gateway JSON API (``/v3/kv/put``, ``/v3/kv/range``,
base64 keys and values) with httpx. No Python etcd client is pinned, and the JSON gateway is
what etcd 3.5 serves on its client port anyway.

Errors::

    RuntimeError
     └─ EtcdRequestError     a put/range call failed (URL and cause in the message)
    TimeoutError
     └─ ReadinessTimeout
         └─ EtcdUnhealthyError   /health never said "true" before the deadline
"""
from __future__ import annotations

import base64
import logging
import os
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from .binaries import etcd_bin
from .processes import ManagedProcess, ReadinessTimeout, poll_until

__all__ = [
    "EtcdRequestError",
    "EtcdUnhealthyError",
    "etcd_put_get",
    "mtls_context",
    "start_etcd",
    "wait_etcd_healthy",
]

log = logging.getLogger(__name__)

PathLike = str | os.PathLike[str]


class EtcdUnhealthyError(ReadinessTimeout):
    """etcd did not report healthy in time (no leader, TLS refused, not listening...)."""


class EtcdRequestError(RuntimeError):
    """A KV request through the JSON gateway failed."""


def start_etcd(argv: Sequence[str | os.PathLike[str]], log_path: Path,
               env: Mapping[str, str] | None = None) -> ManagedProcess:
    """Start the real etcd ELF with ``argv`` (flags only, no binary), logging to ``log_path``."""
    return ManagedProcess.start("etcd", [etcd_bin(), *argv], Path(log_path), env=env)


def mtls_context(ca_file: PathLike, cert_file: PathLike, key_file: PathLike) -> ssl.SSLContext:
    """An SSL context that trusts ``ca_file`` and presents the client certificate."""
    for path in (ca_file, cert_file, key_file):
        if not Path(path).is_file():  # ssl's own error does not say which file
            raise FileNotFoundError(f"TLS file not found: {os.fspath(path)}")
    ctx = ssl.create_default_context(cafile=os.fspath(ca_file))
    ctx.load_cert_chain(os.fspath(cert_file), os.fspath(key_file))
    return ctx


def _client(ca_file: PathLike, cert_file: PathLike, key_file: PathLike,
            timeout: float) -> httpx.Client:
    # trust_env=False: a proxy from the environment must never see loopback etcd traffic.
    return httpx.Client(verify=mtls_context(ca_file, cert_file, key_file), trust_env=False,
                        timeout=timeout)


def wait_etcd_healthy(client_url: str, ca_file: PathLike, cert_file: PathLike, key_file: PathLike,
                      timeout: float = 30.0, *, process: ManagedProcess | None = None) -> None:
    """Poll ``GET {client_url}/health`` over mTLS until it answers ``{"health": "true"}``.

    Pass ``process`` to fail at once (with its log tail) if etcd exits instead of waiting out
    the deadline.
    """
    url = f"{client_url.rstrip('/')}/health"
    with _client(ca_file, cert_file, key_file, timeout=min(2.0, timeout)) as client:

        def probe() -> bool | None:
            if process is not None:
                process.ensure_running()
            resp = client.get(url)
            body = resp.json()
            if resp.status_code == 200 and body.get("health") == "true":
                return True
            raise EtcdRequestError(f"HTTP {resp.status_code} {body}")

        try:
            poll_until(probe, timeout=timeout, what=f"etcd {url}")
        except ReadinessTimeout as exc:
            raise EtcdUnhealthyError(str(exc)) from exc
    log.info("etcd healthy at %s", client_url)


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def etcd_put_get(client_url: str, ca_file: PathLike, cert_file: PathLike, key_file: PathLike,
                 key_name: str, value: str, timeout: float = 10.0) -> str:
    """Write ``key_name=value`` then read it back; return the value etcd returned.

    Used to prove that a client certificate is accepted for both writes and reads.
    """
    base = client_url.rstrip("/")
    with _client(ca_file, cert_file, key_file, timeout=timeout) as client:
        _post(client, f"{base}/v3/kv/put", {"key": _b64(key_name), "value": _b64(value)})
        body = _post(client, f"{base}/v3/kv/range", {"key": _b64(key_name)})
    kvs = body.get("kvs") or []
    if not kvs:
        raise EtcdRequestError(f"{base}/v3/kv/range: key {key_name!r} not found after put: {body}")
    return base64.b64decode(kvs[0].get("value", "")).decode()


def _post(client: httpx.Client, url: str, payload: dict[str, str]) -> dict[str, Any]:
    """POST JSON to the gateway; any transport, HTTP or gRPC-level error becomes EtcdRequestError."""
    try:
        resp = client.post(url, json=payload)
        resp.raise_for_status()
        body = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        raise EtcdRequestError(f"{url}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(body, dict) or "error" in body:
        raise EtcdRequestError(f"{url}: etcd error {body}")
    return body
