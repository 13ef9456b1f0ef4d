"""The lab kubelet's own health endpoint, where the node's KubeletConfiguration puts it.

Why: the health phase asks every node's kubelet (`GET http://127.0.0.1:<healthzPort>/healthz`,
answer `ok`), as one would on a real node; a worker has no other endpoint to ask. The
stand-in reads `healthzBindAddress` and `healthzPort` from the rendered config
(/var/lib/kubelet/config.yaml), so a config that moved the port or turned it off (port 0, as
the real kubelet allows) is what the health check sees. A loopback bind address becomes the
node's own address (the lab's nodes share the host's loopback). While the control file
`<root>/var/lib/bke-lab/unhealthy/kubelet` exists, it answers 500, like a kubelet whose
runtime or sync loop fails.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

import yaml

from bke.core.paths import KUBELET_CONFIG

from ..lablayout import LabLayout
from .httpd import HealthServer

__all__ = ["KubeletHealthz", "healthz_address"]

log = logging.getLogger("bke.agent.kubelet")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
DEFAULT_PORT = 10248  # the kubelet's default healthzPort (KubeletConfiguration v1beta1)


def healthz_address(config_file: Path, ip: str) -> tuple[str, int] | None:
    """(host, port) the kubelet of this config serves /healthz on; None if it serves none
    (port 0) or there is no readable config yet."""
    try:
        doc = yaml.safe_load(config_file.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict):
        return None
    port = int(doc.get("healthzPort", DEFAULT_PORT) or 0)
    if port == 0:
        return None
    host = str(doc.get("healthzBindAddress") or "127.0.0.1")
    return (ip if host in LOOPBACK else host), port


class KubeletHealthz:
    def __init__(self, layout: LabLayout, ip: str, log_ids: Mapping[str, str], netns: str = ""):
        self.layout, self.ip, self.ids, self.netns = layout, ip, dict(log_ids), netns
        self._server: HealthServer | None = None

    def answer(self, path: str) -> tuple[int, str]:
        if path.split("?", 1)[0] != "/healthz":
            return 404, "404 page not found"
        flag = self.layout.unhealthy_file("kubelet")
        if flag.exists():
            return 500, f"unhealthy: bke-lab: {flag} exists"
        return 200, "ok"

    async def start(self) -> None:
        where = healthz_address(self.layout.root / KUBELET_CONFIG.lstrip("/"), self.ip)
        if where is None or self._server is not None:
            return
        server = HealthServer(where[0], where[1], self.answer, netns=self.netns)
        try:
            await server.start()
        except OSError as exc:  # a real kubelet logs this and runs on; /healthz then does not answer
            log.warning("kubelet healthz cannot listen on %s:%s: %s", where[0], where[1], exc.strerror or exc, extra=self.ids)
            return
        self._server = server

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.close()
            self._server = None
