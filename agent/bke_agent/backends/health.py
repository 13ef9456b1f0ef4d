"""Poll an HTTP(S) health endpoint until it answers as expected, or say what it last said.

Why the step's own deadline: the dispatcher reads stderr to tell an operator what is wrong,
so a timeout must report the last answer ("HTTP 500 ...", "connection refused"), not just
"timed out". Without TLS files, HTTPS is not verified, as kubelet HTTPS probes are not.
"""
from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

import httpx

from ..errors import NotHealthy, StepError
from .base import StepOutcome

__all__ = ["tls_context", "wait_http"]

POLL_S = (0.1, 0.25, 0.5, 1.0)


def tls_context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    for p in (ca, cert, key):
        if not p.is_file():
            raise StepError(f"TLS file not found: {p}")
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


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
                resp = await client.get(url, timeout=max(0.5, min(5.0, remaining)), extensions=extensions)
                body = resp.text
                if resp.status_code == expect_status and (expect_body is None or expect_body in body):
                    return StepOutcome("Succeeded", stdout=f"{shown}: HTTP {resp.status_code} {body[:200]}\n")
                last = f"HTTP {resp.status_code} {body[:300]}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise NotHealthy(shown, timeout_s, last)
            await asyncio.sleep(min(POLL_S[min(polls, len(POLL_S) - 1)], max(0.0, deadline - time.monotonic())))
            polls += 1
