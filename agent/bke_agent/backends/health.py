"""Poll an HTTP(S) health endpoint until it answers as expected, or say what it last said.

Why the step's own deadline: the dispatcher reads stderr to tell an operator what is wrong,
so a timeout must report the last answer ("HTTP 500", "connection refused"), not just
"timed out".

HTTPS is verified (`probe_verify`): with the step's TLS files when it names them, else against
the CA that signs the port's serving certificate, read from the node (bke.core.host_actions.
endpoints.SERVING_CAS: the cluster CA for the apiserver). A missing CA file fails the probe, it
is never asked unverified instead: an unverified answer could come from whatever holds the port
on the node. The exception is the two components that sign their own serving certificate
(kube-controller-manager, kube-scheduler: no CA on any node; endpoints.NO_SERVING_CA).

What it reports is the status code, whether the expected text was in the body, and how long
the answer took; never the body itself. A probe's URL and TLS files are limited to the node's
own component endpoints and BKE's PKI (bke.core.host_actions.endpoints, checked on the command
before it runs), and its answer carries nothing of what the endpoint said beyond its status.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import httpx

from bke.contracts.agent_steps import TlsFiles
from bke.core.host_actions.endpoints import serving_ca
from bke.contracts.statuses import StepResultStatus

from ..errors import NotHealthy, StepError
from .base import StepOutcome
from .paths import read_path

__all__ = ["probe_verify", "tls_context", "tls_verify", "wait_http"]

POLL_S = (0.1, 0.25, 0.5, 1.0)


def tls_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    for p in (ca, cert, key):
        if not p.is_file():
            raise StepError(f"TLS file not found: {p}")
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


def tls_verify(root: Path, tls: TlsFiles | None) -> ssl.SSLContext | bool:
    """How to check a server with the step's TLS files (under the node's `root`); no files, no check."""
    return False if tls is None else tls_context(*(read_path(root, p) for p in (tls.ca, tls.cert, tls.key)))


def probe_verify(root: Path, url: str, tls: TlsFiles | None) -> ssl.SSLContext | bool:
    """How a health probe of `url` checks its server: the step's TLS files, else the CA of the
    port's serving certificate (under the node's `root`); False only for HTTP and the ports
    whose component signs its own (bke.core.host_actions.endpoints)."""
    if tls is not None:
        return tls_verify(root, tls)
    try:
        ca = serving_ca(url)
    except ValueError as exc:
        raise StepError(str(exc)) from None
    if ca is None:
        return False
    local = read_path(root, ca)
    if not local.is_file():
        raise StepError(f"{ca}: the CA that verifies {url} is not on this node (it is not asked unverified)")
    return ssl.create_default_context(cafile=str(local))


async def wait_http(url: str, *, expect_status: int, expect_body: str | None, timeout_s: float,
                    verify: ssl.SSLContext | bool = False, sni_hostname: str | None = None,
                    shown_url: str | None = None) -> StepOutcome:
    """GET `url` until status (and body substring) match; `shown_url` is what messages name."""
    shown = shown_url or url
    deadline = time.monotonic() + timeout_s
    extensions = {"sni_hostname": sni_hostname} if sni_hostname else None
    last = "no answer yet"
    polls = 0
    async with httpx.AsyncClient(verify=verify, trust_env=False) as client:
        while True:
            remaining = deadline - time.monotonic()
            try:
                t0 = time.monotonic()
                resp = await client.get(url, timeout=max(0.5, min(5.0, remaining)), extensions=extensions)
                ms = round((time.monotonic() - t0) * 1000)
                found = expect_body is None or expect_body in resp.text
                if resp.status_code == expect_status and found:
                    return StepOutcome(StepResultStatus.SUCCEEDED, stdout=f"{shown}: HTTP {resp.status_code} in {ms} ms\n")
                last = f"HTTP {resp.status_code} in {ms} ms" + ("" if found else ", without the expected text")
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise NotHealthy(shown, timeout_s, last)
            await asyncio.sleep(min(POLL_S[min(polls, len(POLL_S) - 1)], max(0.0, deadline - time.monotonic())))
            polls += 1
