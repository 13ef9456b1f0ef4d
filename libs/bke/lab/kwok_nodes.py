"""Many kwok Nodes at once, for scale runs of a real-control-plane lab: the Nodes of agents that
run no kubelet stand-in (a fleet of null agents, bench/install.py and the 1,000-node test) are
registered here with the operator's admin credential, in the shape a kubelet registers
(bke.lab.node_object), with bounded concurrency. The Node authorizer and NodeRestriction are
proven on the 18-node lab, where every Node is registered by its own node's identity.
"""
from __future__ import annotations

import asyncio
import base64
import os
import ssl
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import httpx
import yaml

from .node_object import KubeletFlags, node_object

__all__ = ["admin_client", "kubeconfig_tls", "register_nodes", "wait_allowed", "wait_api"]


def kubeconfig_tls(kubeconfig: bytes) -> tuple[str, ssl.SSLContext]:
    """(server URL, a TLS context with the kubeconfig's CA and client pair) of a kubeconfig with
    embedded data, as BKE writes them. The pair passes through a 0600 temporary file (ssl loads
    a chain from files only) that is removed once loaded."""
    doc: dict[str, Any] = yaml.safe_load(kubeconfig)
    cluster, user = doc["clusters"][0]["cluster"], doc["users"][0]["user"]
    ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    fd, path = tempfile.mkstemp(prefix="bke-client-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(base64.b64decode(user["client-certificate-data"]) + b"\n" + base64.b64decode(user["client-key-data"]))
        ctx.load_cert_chain(path)
    finally:
        os.unlink(path)
    return str(cluster["server"]), ctx


def admin_client(kubeconfig: bytes, limits: int = 64) -> tuple[str, httpx.AsyncClient]:
    """(server URL, an HTTP/1.1 client with the kubeconfig's CA and client pair)."""
    server, ctx = kubeconfig_tls(kubeconfig)
    client = httpx.AsyncClient(verify=ctx, trust_env=False, timeout=30.0,
                               limits=httpx.Limits(max_connections=limits, max_keepalive_connections=limits))
    return server, client


async def wait_api(server: str, client: httpx.AsyncClient, timeout_s: float) -> None:
    """Until /readyz answers 200 (TimeoutError after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if (await client.get(f"{server}/readyz")).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{server} not ready after {timeout_s:.0f}s")
        await asyncio.sleep(1.0)  # polling under a deadline


async def wait_allowed(server: str, client: httpx.AsyncClient, verb: str, resource: str, timeout_s: float) -> None:
    """Until the credential may `verb` `resource` (a SelfSubjectAccessReview): admin.conf has its
    rights only once the install's bootstrap RBAC is applied (the addons phase)."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"verb": verb, "resource": resource}}}
    deadline = time.monotonic() + timeout_s
    while True:
        resp = await client.post(f"{server}/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review)
        if resp.status_code == 201 and resp.json().get("status", {}).get("allowed"):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"not allowed to {verb} {resource} after {timeout_s:.0f}s: {resp.status_code} {resp.text[:200]}")
        await asyncio.sleep(1.0)  # polling under a deadline


async def register_nodes(server: str, client: httpx.AsyncClient, nodes: Sequence[tuple[str, str]],
                         kubelet_version: str, max_pods: int = 110, concurrency: int = 32) -> int:
    """Create a Node per (name, ip) (409: there already, fine); the number created."""
    gate = asyncio.Semaphore(concurrency)
    created = 0

    async def one(name: str, ip: str) -> None:
        nonlocal created
        body = node_object(KubeletFlags(name, ip, "/etc/kubernetes/kubelet.conf"), max_pods, kubelet_version)
        async with gate:
            for attempt in range(5):
                resp = await client.post(f"{server}/api/v1/nodes", json=body)
                if resp.status_code in (201, 409):
                    created += resp.status_code == 201
                    return
                if resp.status_code not in (429, 500, 503, 504):
                    raise ValueError(f"POST node {name}: {resp.status_code} {resp.text[:200]}")
                await asyncio.sleep(0.5 * 2 ** attempt)  # the apiserver's pace (priority and fairness)
            raise TimeoutError(f"POST node {name}: still refused after 5 tries")

    await asyncio.gather(*(one(n, ip) for n, ip in nodes))
    return created
