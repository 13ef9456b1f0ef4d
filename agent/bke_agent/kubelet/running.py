"""A started static pod: a real process (etcd; in a real-control-plane lab every control-plane
component and haproxy) or a simulation serving the pod's health.

Why two kinds: the lab's etcd clusters must be real (their health, membership and client
certificates are what the install is judged on), while the Kubernetes components run for real
only when their binaries are built (`python3 dev.py kube`); a simulated component still proves
that its files are in place and lets a test turn its health red with a control file.
"""
from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from urllib.parse import urlsplit

import httpx

from bke.adapters.runtime.processes import ManagedProcess, stop_pid
from bke.core.host_actions.endpoints import serving_ca

from ..lab_netns import in_netns
from ..lablayout import LabLayout, image_version
from .httpd import HealthServer, self_signed_pair, server_context
from .pods import PodPlan

__all__ = ["PodStartError", "RealPod", "SimulatedPod", "serving_verify"]

STOP_TIMEOUT_S = 10.0
# When the lab's kubelet itself stops (the agent stops: the lab's machine goes down), its pods get
# this long before SIGKILL. An etcd leader whose peers stop at the same time (`bke lab down`)
# otherwise waits about 7 s for a leadership transfer that cannot happen; etcd is crash-safe
# (its WAL is fsynced per commit), so a machine going down may cut that short.
SHUTDOWN_GRACE_S = 2.0


class PodStartError(RuntimeError):
    """The pod could not start (port taken, TLS pair unusable, process died at once)."""


class _ReloadingPair:
    """A serving context that picks up a changed certificate/key pair at the next handshake,
    as the kube-apiserver's dynamic serving certificate does: a renewed file takes effect in
    a simulated component exactly when it would in the real one (no restart)."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.cert, self.key = cert, key
        self.stamp = self._stamp()
        self.context = self._load()

    def _stamp(self) -> tuple[int, ...]:
        a, b = self.cert.stat(), self.key.stat()
        return a.st_mtime_ns, a.st_size, a.st_ino, b.st_mtime_ns, b.st_size, b.st_ino

    def _load(self) -> ssl.SSLContext:
        ctx = server_context(self.cert, self.key)
        ctx.sni_callback = self._on_hello
        return ctx

    def _on_hello(self, conn: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
        try:
            stamp = self._stamp()
            if stamp != self.stamp:
                self.context, self.stamp = self._load(), stamp
        except (OSError, ssl.SSLError):
            return None  # a half-written pair: keep serving the last good one, like upstream
        conn.context = self.context
        return None


class SimulatedPod:
    mode = "simulated"
    pid: int | None = None

    def __init__(self, plan: PodPlan, layout: LabLayout, ip: str) -> None:
        self.plan, self.layout, self.ip = plan, layout, ip
        self.servers: list[HealthServer] = []
        self.fault = ""  # set at start from faults.json: this component's version is broken

    def healthy(self) -> bool:
        return not self.fault and not self.layout.unhealthy_file(self.plan.name).exists()

    def answer(self, path: str) -> tuple[int, str]:
        etcd_style = path.startswith("/health")
        if self.healthy():
            return 200, '{"health":"true","reason":""}' if etcd_style else "ok"
        reason = self.fault or f"bke-lab: {self.layout.unhealthy_file(self.plan.name)} exists"
        return 500, f'{{"health":"false","reason":"{reason}"}}' if etcd_style else f"unhealthy: {reason}"

    def _tls(self) -> ssl.SSLContext:
        if self.plan.tls_pair is not None:
            cert, key = self.plan.tls_pair
            try:
                return _ReloadingPair(cert, key).context
            except (OSError, ssl.SSLError) as exc:
                raise PodStartError(f"serving certificate {cert.name} / {key.name} unusable: {exc}") from None
        return server_context(*self_signed_pair(self.layout.tls, self.ip))

    async def start(self) -> None:
        # Read once, as a started binary's behaviour is fixed: a rollback to another version
        # starts a new pod, which reads the file again.
        version = image_version(self.plan.image)
        if version and version in self.layout.unhealthy_versions(self.plan.name):
            self.fault = f"bke-lab: {self.plan.name} {version} is broken on purpose ({self.layout.faults_file.name})"
        try:
            for probe in self.plan.probes:
                tls = self._tls() if probe.scheme == "https" else None
                server = HealthServer(probe.host, probe.port, self.answer, tls)
                await server.start()
                self.servers.append(server)
        except OSError as exc:
            await self.stop()
            raise PodStartError(f"cannot listen on {probe.host}:{probe.port}: {exc.strerror or exc}") from None

    async def stop(self, grace_s: float = STOP_TIMEOUT_S) -> None:
        for server in self.servers:
            await server.close()
        self.servers.clear()

    def alive(self) -> bool:
        return True

    async def ready(self) -> bool:
        return self.healthy()


class RealPod:
    mode = "real"

    def __init__(self, plan: PodPlan, layout: LabLayout, binary: Path, netns: str = "") -> None:
        self.plan, self.layout, self.binary = plan, layout, binary
        self.netns = netns  # the node's network namespace ("": the root one; bke_agent.lab_netns)
        self.proc: ManagedProcess | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    async def start(self) -> None:
        run_dir = self.layout.run_dir(self.plan.name)
        run_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.layout.pod_log(self.plan.name)
        try:
            argv = in_netns(self.netns, [str(self.binary), *self.plan.local.argv])
            self.proc = ManagedProcess.start(self.plan.name, argv, log_path, cwd=run_dir)
        except OSError as exc:
            raise PodStartError(f"cannot start {self.binary}: {exc}") from None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def exit_reason(self) -> str:
        tail = self.proc.log_tail(5) if self.proc else ""
        return f"process exited; last log lines: {tail[-1000:]}"

    async def ready(self) -> bool:
        url = self.plan.local.ready_url or self.plan.local.health_url
        if url is None:
            return self.alive()
        verify = serving_verify(self.layout.root, url)
        if verify is None:
            return await _accepts(url)
        try:
            async with httpx.AsyncClient(verify=verify, trust_env=False, timeout=2.0) as client:
                return (await client.get(url)).status_code == 200
        except httpx.HTTPError:
            return False

    async def stop(self, grace_s: float = STOP_TIMEOUT_S) -> None:
        if self.proc is not None:
            await asyncio.to_thread(stop_pid, self.proc.pid, grace_s)
            self.proc = None


def serving_verify(root: Path, url: str) -> ssl.SSLContext | bool | None:
    """How the stand-in checks a pod's HTTPS server: against the CA of its port's serving
    certificate in the node's tree (the apiserver's: the cluster CA), by its URL's host. A CA
    file missing (not yet written) leaves the pod not ready: it is not asked unverified. None:
    a component that signs its own certificate (kube-controller-manager, kube-scheduler, a port
    of no table): no CA on the node can verify it, so only whether it accepts connections is
    looked at and nothing it answers is read. False: plain HTTP."""
    try:
        ca = serving_ca(url)
    except ValueError:
        return None
    if ca is None:
        return None if urlsplit(url).scheme == "https" else False
    local = root / ca.lstrip("/")
    # no CA file: a context that trusts nothing (certificate and name still required)
    return ssl.create_default_context(cafile=str(local)) if local.is_file() else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


async def _accepts(url: str) -> bool:
    u = urlsplit(url)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(u.hostname, u.port), 2.0)
    except (OSError, asyncio.TimeoutError):
        return False
    writer.close()
    return True
