"""What a kubelet does through the Kubernetes API first, in a real-control-plane lab: register its
Node with the node's own credentials.

Why the stand-in registers the Node itself rather than leave it to kwok: the Node must be created
by `system:node:<name>` through the node's rendered kubelet.conf and unit flags, so that the
Node authorizer, NodeRestriction and BKE's certificates are what a real kubelet meets. kwok then
keeps the Node Ready and runs its pods (bke.lab.kwok: one process for the lab, with the
operator's credential, since kwok lists every Node it manages, which no node identity may).

What is read from the node tree (what a real kubelet reads):
    /etc/systemd/system/kubelet.service   --hostname-override, --node-ip, --kubeconfig,
                                          --node-labels, --register-with-taints
    /var/lib/kubelet/config.yaml          maxPods
    /usr/bin/kubelet                      its version (a lab placeholder names its URL)
"""
from __future__ import annotations

import logging
import re
import ssl
import time
from collections.abc import Mapping
from pathlib import Path

import httpx
import yaml

from bke.lab.kwok_nodes import kubeconfig_tls
from bke.lab.node_object import KubeletFlags, kubelet_flags, node_object
from bke.core.paths import KUBELET_CONFIG

from ..lablayout import LabLayout

__all__ = ["KUBELET_UNIT", "NodeAgent"]

log = logging.getLogger("bke.agent.kubelet")
KUBELET_UNIT = "etc/systemd/system/kubelet.service"
REGISTER_EVERY_S = 2.0
_VERSION = re.compile(rb"/v?(\d+\.\d+\.\d+)/")


class NodeAgent:
    """Registers this node's Node as its kubelet would; `tick` is called on every kubelet sync.
    kwok (one per lab, bke.lab.kwok) then keeps the Node Ready and runs the pods bound to it."""

    def __init__(self, layout: LabLayout, ip: str, ids: Mapping[str, str]) -> None:
        self.layout, self.ip, self.ids = layout, ip, dict(ids)
        self.registered = ""  # the node name once its Node exists
        self.next_try = 0.0
        self.last_error = ""

    def _flags(self) -> KubeletFlags | None:
        try:
            return kubelet_flags((self.layout.root / KUBELET_UNIT).read_text(), self.ip)
        except OSError:
            return None

    def _max_pods(self) -> int:
        try:
            doc = yaml.safe_load((self.layout.root / KUBELET_CONFIG.lstrip("/")).read_text()) or {}
            return int(doc.get("maxPods", 110))
        except (OSError, ValueError, TypeError, yaml.YAMLError):
            return 110

    def _kubelet_version(self) -> str:
        try:
            m = _VERSION.search((self.layout.root / "usr/bin/kubelet").read_bytes()[:4096])
        except OSError:
            return ""
        return f"v{m[1].decode()}" if m else ""

    async def tick(self) -> None:
        if self.registered:
            return
        now = time.monotonic()
        if now < self.next_try:
            return
        self.next_try = now + REGISTER_EVERY_S
        flags = self._flags()
        if flags is None or not flags.name:
            return
        kubeconfig = self.layout.root / flags.kubeconfig.lstrip("/")
        if not kubeconfig.is_file():
            return  # its certificates are not delivered yet: a real kubelet would crash-loop here
        try:
            await self._register(flags, kubeconfig)
        except (OSError, ValueError, KeyError, httpx.HTTPError, ssl.SSLError) as exc:
            why = f"{type(exc).__name__}: {exc}"
            if why != self.last_error:
                log.warning("node registration: %s", why, extra=self.ids)
            self.last_error = why

    async def _register(self, flags: KubeletFlags, kubeconfig: Path) -> None:
        server, ctx = kubeconfig_tls(kubeconfig.read_bytes())
        body = node_object(flags, self._max_pods(), self._kubelet_version())
        async with httpx.AsyncClient(verify=ctx, trust_env=False, timeout=10.0) as client:
            resp = await client.post(f"{server}/api/v1/nodes", json=body)
        if resp.status_code not in (201, 409):  # 409: registered before (a restarted kubelet)
            raise ValueError(f"POST /api/v1/nodes as system:node:{flags.name}: {resp.status_code} {resp.text[:300]}")
        self.registered = flags.name
        log.info("node registered", extra={**self.ids, "nodeName": flags.name})

