"""The lab on one machine: the embedded NATS + Redis, each service as its own OS process, one
agent process per node with root `<workdir>/hosts/<hostname>/`. Everything is tracked by PID
in `<workdir>/processes.json`, so `bke lab down` stops exactly what the lab started.

Layout of a lab workdir:
    runtime/            NATS JetStream store, Redis AOF, runtime.json (bke.adapters.runtime.embedded)
    keys/<kind>.key     the at-rest keys, one per kind (0600; bke.lab.key_files): each service is
                        given only the kinds it uses (BKE_KEY_FILE_<KIND>), the agents none
    command-key.pub     the command-signing key's public line, as the agents are given it: the pin
                        of `bke agent bootstrap --command-key-file` (bke.lab.trust)
    creds/<name>.creds  each process's NATS identity (0600; bke.lab.identities); the CLI uses
                        creds/operator.creds (`bke ... --workdir`)
    logs/<name>.log     one log per process
    hosts/<hostname>/   each node's root (what would be / on a real node)
    processes.json      {"services": {name: pid}, "agents": {hostname: launcher pid},
                         "http": {name: port}, "kwok": {cluster: pid}, "renewer": {"renewer": pid}}:
                         the agents' renewer (bke.adapters.auth.serve_renewals, with NATS
                         authentication only); each service's HTTP port
                         (its dashboard, /metrics, /readyz), chosen free at its start
                         (`http_urls`); a real-control-plane lab's kwok per cluster
    forkserver.sock     the lab's fork server (bke.lab.forkserver): every service, the renewer and
    forkserver.pid      each agent launcher is forked from it; its pid, and the lock two starts
    forkserver.lock     take turns on; `bke lab down` stops it after the processes it forked
    control-plane       "real" when installed with `--control-plane real` (bke.lab.kube_binaries)
    network.json        a real-control-plane lab on 198.18.0.0/15: its namespaces, veths and bridge
                        (bke.lab.netns), taken down by `bke lab down`
    kwok/<c>-super-admin.conf the kubeconfig kwok uses (0600)
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from nats.js import JetStreamContext

from bke.adapters.bus.connect import BusAccess
from bke.core.plan import Plan
from . import forkserver
from .ha_runtime import ha_env, lab_runtime, stop_ha
from .identities import LabIdentities
from bke.adapters.runtime import EmbeddedRuntime, RuntimeInfo, redis_acl
from bke.adapters.runtime.binaries import MissingBinaryError, etcd_bin
from bke.adapters.runtime.processes import ManagedProcess, free_port, pid_alive, port_is_free, stop_pid
from bke.core.secrets.at_rest import SECRET_KEY_ENV
from .key_files import ensure_lab_key_files, lab_key_dir, lab_key_file, service_key_env
from .kube_binaries import cache_dir
from .netns_ops import ensure_workdir_network, remove_workdir_network
from .trust import ensure_lab_command_key, ensure_lab_record_keys, provision_lab_agents

__all__ = ["CONTROL_PLANE_FILE", "LabSupervisor", "SERVICES", "lab_env"]

CONTROL_PLANE_FILE = "control-plane"
NETNS_ENV = "BKE_LAB_NETNS"  # the agent's node runs its pods in this network namespace (bke.lab.netns)

SERVICES = ("planner", "certs", "renderer", "dispatcher", "upgrader")
# One durable consumer per service that proves it is up. Not one on BKE_AGENT_OUT: the deploy
# step makes those before any service starts (bke.adapters.bus.streams, `interest`).
SERVICE_CONSUMERS = (
    ("BKE_COMMANDS", "planner"),
    ("BKE_EVENTS", "certs-plans"),
    ("BKE_EVENTS", "renderer-plans"),
    ("BKE_EVENTS", "dispatcher-plans"),
    ("BKE_COMMANDS", "upgrader-requests"),
    ("BKE_COMMANDS", "upgrader-retries"),
)


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def _without_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without its at-rest key files: a lab process gets the lab's own."""
    return {k: v for k, v in environ.items() if k != SECRET_KEY_ENV and not k.startswith("BKE_KEY_FILE_")}


def lab_env(info: RuntimeInfo, fetch: bool = False, control_plane: str = "simulated") -> dict[str, str]:
    """The processes' environment, without any at-rest key (each service is given its own
    kinds: `start_service_process`). `fetch`: the agents download from the spec's httpRepo and the
    dispatcher reads its `.sha256` files (a bundle served by `bke bundle serve`), instead of
    placeholders. `control_plane` "real": the agents' kubelets run the built Kubernetes and etcd
    binaries (bke.lab.kube_binaries), and the dispatcher and upgrader do their Kubernetes API
    work against the lab's apiservers instead of recording it."""
    env = _without_keys(os.environ)
    if control_plane == "real":
        env.update(BKE_LAB_CONTROL_PLANE="real", BKE_KUBE_CACHE=str(cache_dir()),
                   BKE_DISPATCHER_CLUSTER_API="real", BKE_UPGRADER_CLUSTER_API="real")
    else:
        env.pop("BKE_LAB_CONTROL_PLANE", None)
    env.update(BKE_DISPATCHER_REPO_SOURCE="http-repo" if fetch else "auto",
               BKE_UPGRADER_REPO_SOURCE="http-repo" if fetch else "auto",
               BKE_AGENT_LAB_FETCH="download" if fetch else "placeholder")
    env.update(
        BKE_NATS_URL=info.nats_url,
        BKE_REDIS_URL=info.redis_url,
        BKE_DISPATCHER_MODE="lab",
        BKE_UPGRADER_MODE="lab",
        # the lab's simulated pods answer within a second or two: a broken one is rolled back
        # sooner; real ones (an apiserver's shutdown delay, then its start) get a host's time
        BKE_UPGRADER_COMPONENT_TIMEOUT_S=env.get("BKE_UPGRADER_COMPONENT_TIMEOUT_S",
                                                 "180" if control_plane == "real" else "45"),
        BKE_DISPATCHER_HEALTH_INTERVAL_S=env.get("BKE_DISPATCHER_HEALTH_INTERVAL_S", "30"),
        **({"BKE_NATS_TLS_CA": info.nats_tls_ca} if info.nats_tls_ca else {}),
        PYTHONUNBUFFERED="1",
    )
    env.update(ha_env(info))
    return env


@dataclass
class LabSupervisor:
    workdir: Path
    # NATS with authentication (every process its own identity). bench/install.py turns it off:
    # its fleet runs thousands of agents on one connection, which no single agent identity allows.
    auth: bool = True
    tls: bool = False  # NATS over TLS (a CA of the lab's own; every process verifies with it)
    fetch: bool = False  # binaries downloaded from the spec's httpRepo, not placeholders (lab_env)
    # Beyond one server (bke.lab.ha_runtime): NATS as a cluster of this many nodes (0: one
    # server), Redis as a primary, a replica and three sentinels. A work directory that ran
    # with them keeps them.
    nats_cluster: int = 0
    redis_sentinel: bool = False
    # "simulated" or "real" (lab_env); None: what the work directory was installed with. A work
    # directory keeps its mode, as it keeps its NATS cluster: `bke lab down` and a new workdir to change it.
    control_plane: str | None = None

    def __post_init__(self) -> None:
        self.workdir = self.workdir.resolve()
        mode_file = self.workdir / CONTROL_PLANE_FILE
        if self.control_plane is None:
            self.control_plane = mode_file.read_text().strip() if mode_file.is_file() else "simulated"
        elif self.control_plane != "simulated" or mode_file.is_file():
            self.workdir.mkdir(parents=True, exist_ok=True)
            mode_file.write_text(self.control_plane + "\n")
        self.runtime = lab_runtime(self.workdir / "runtime", nats_cluster=self.nats_cluster,
                                   redis_sentinel=self.redis_sentinel, auth=self.auth, tls=self.tls,
                                   key_dir=lab_key_dir(self.workdir))

    @property
    def mode(self) -> str:
        return self.control_plane or "simulated"

    def identities(self, info: RuntimeInfo) -> LabIdentities | None:
        """The lab's identity keeper (None: NATS runs without authentication)."""
        if not self.auth:
            return None
        if self.runtime.nats_auth is None:
            self.runtime.ensure_started()
        return LabIdentities(self.workdir, self.runtime, info)

    def _bus_env(self, info: RuntimeInfo, role: str, cluster: str | None = None, node: str | None = None) -> dict[str, str]:
        ids = self.identities(info)
        if ids is None:
            return {}
        try:
            return ids.env(role, cluster, node)
        finally:
            ids.close()

    def operator_access(self, info: RuntimeInfo) -> BusAccess:
        """How the CLI reaches this lab's NATS: the operator identity."""
        return self.bus_access(info, "operator")

    def bus_access(self, info: RuntimeInfo, role: str) -> BusAccess:
        """How a process of `role` (not an agent) reaches this lab's NATS."""
        env = self._bus_env(info, role)
        tls = info.nats_tls_ca
        if not env:
            return BusAccess(info.nats_url, tls_ca=Path(tls) if tls else None)
        return BusAccess(info.nats_url, Path(env["BKE_NATS_CREDS"]), env["BKE_NATS_INBOX_PREFIX"],
                         Path(tls) if tls else None)

    # bookkeeping ----------------------------------------------------------------
    @property
    def _pids_file(self) -> Path:
        return self.workdir / "processes.json"

    def pids(self) -> dict[str, dict[str, int]]:
        if self._pids_file.exists():
            return json.loads(self._pids_file.read_text())
        return {"services": {}, "agents": {}}

    def _save(self, pids: dict[str, dict[str, int]]) -> None:
        tmp = self._pids_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(pids, indent=2, sort_keys=True))
        tmp.replace(self._pids_file)

    # start ----------------------------------------------------------------------
    def ensure_key_files(self) -> dict[str, Path]:
        """The at-rest key files, one per kind (bke.lab.key_files)."""
        return ensure_lab_key_files(self.workdir)

    def ensure_runtime(self) -> RuntimeInfo:
        """NATS and Redis up, and the streams declared (the runtime's deploy step) before any
        service or agent starts."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.ensure_key_files()
        return self.runtime.ensure_started()

    def ensure_services(self, info: RuntimeInfo, only: tuple[str, ...] = SERVICES) -> dict[str, int]:
        """Start each service that is not running; a running one is left alone (idempotent)."""
        ensure_lab_record_keys(info, self.workdir)  # the services' users only read them
        pids = self.pids()
        env = lab_env(info, self.fetch, self.mode)
        for name in only:
            pid = pids["services"].get(name)
            if pid and pid_alive(pid):
                continue
            # a free port per service (several labs share a machine); a restarted service keeps
            # its port while it is free, so that a printed dashboard URL stays right
            ports = pids.setdefault("http", {})
            kept = ports.get(name)
            ports[name] = port = kept if kept and port_is_free("127.0.0.1", kept) else free_port()
            pids["services"][name] = self.start_service_process(info, dict(env, BKE_HTTP_PORT=str(port)), name, name)
        self._save(pids)
        self.ensure_renewer(info)
        return pids["services"]

    def ensure_renewer(self, info: RuntimeInfo) -> int | None:
        """The agents' renewer (bke.adapters.auth.serve_renewals) beside the services, as a
        deployment runs it: the `renewer` bus identity, its own Redis user and the `authority`
        at-rest key alone. None when NATS runs without authentication (no JWT to renew).
        Idempotent: a running renewer is left alone."""
        if not self.auth:
            return None
        pids = self.pids()
        group = pids.setdefault("renewer", {})
        pid = group.get("renewer")
        if pid and pid_alive(pid):
            return pid
        env = dict(_without_keys(os.environ), PYTHONUNBUFFERED="1", BKE_NATS_URL=info.nats_url,
                   BKE_REDIS_URL=redis_acl.service_url(self.runtime.workdir, info.redis_url, "renewer"),
                   BKE_KEY_FILE_AUTHORITY=str(lab_key_file(self.workdir, "authority")),
                   **self._bus_env(info, "renewer"))
        pid = forkserver.spawn(self.workdir, "renewer", [sys.executable, "-m", "bke.adapters.auth.serve_renewals"],
                               self.workdir / "logs" / "renewer.log", env)
        group["renewer"] = pid
        self._save(pids)
        return pid

    def http_urls(self) -> dict[str, str]:
        """Each running service's HTTP base URL (its dashboard at `/`), by service name."""
        pids = self.pids()
        ports = pids.get("http", {})
        return {name: f"http://127.0.0.1:{ports[name]}" for name in SERVICES
                if name in ports and pid_alive(pids["services"].get(name, 0))}

    def start_service_process(self, info: RuntimeInfo, env: dict[str, str], service: str, key: str) -> int:
        """Start one process of `service`, logging to logs/<key>.log (`key`: the name in
        processes.json; another replica of the same service has a key of its own, bke.lab.replicas)."""
        # each service logs in to Redis as its own ACL user (bke.adapters.runtime.redis_acl) and is given
        # the at-rest keys of its kinds only (bke.lab.key_files)
        own = dict(env, BKE_REDIS_URL=redis_acl.service_url(self.runtime.workdir, info.redis_url, service),
                   **service_key_env(self.workdir, service))
        return forkserver.spawn(self.workdir, key, [_bin(f"bke-{service}")], self.workdir / "logs" / f"{key}.log",
                                {**own, **self._bus_env(info, service)})

    def ensure_agents(self, info: RuntimeInfo, plan: Plan, only: list[str] | None = None) -> dict[str, int]:
        pids = self.pids()
        base = lab_env(info, self.fetch, self.mode)
        base.pop("BKE_REDIS_URL")  # agents never talk to Redis: no credentials for them
        # the etcd the lab's etcd pods run (bke_agent.kubelet.pods, BKE_LAB_ETCD_BINARY): this
        # venv's, also for an agent updated into a venv of its own requirements only
        try:
            base.setdefault("BKE_LAB_ETCD_BINARY", str(etcd_bin()))
        except MissingBinaryError:
            pass  # no etcd here: the agents' own, or simulated pods, as before
        todo = [n for n in plan.nodes if (only is None or n.hostname in only)
                and not (pids["agents"].get(n.hostname) and pid_alive(pids["agents"][n.hostname]))]
        # a lab on 198.18.0.0/15: its control-plane nodes' namespaces first (bke.lab.netns)
        net = ensure_workdir_network(self.workdir, plan) if todo and self.mode == "real" else None
        envs = {}
        for node in todo:
            h = node.hostname
            root = self.workdir / "hosts" / h
            root.mkdir(parents=True, exist_ok=True)
            envs[h] = dict(base, BKE_AGENT_CLUSTER=plan.cluster, BKE_AGENT_NODE=h, BKE_AGENT_BACKEND="lab",
                           BKE_AGENT_ROOT=str(root), BKE_AGENT_IP=node.ip,
                           # always set: an inherited value must never put a node in another's namespace
                           **{NETNS_ENV: net.netns_of(h) if net else ""},
                           **self._bus_env(info, "agent", plan.cluster, h))
        # trust: the agents' keys are made and recorded before they start, and they
        # are given the dispatcher's public key (lab/trust.py)
        self.ensure_key_files()
        command_key = ensure_lab_command_key(info, self.workdir)
        provision_lab_agents(self.operator_access(info), plan.cluster, envs)
        for node in todo:
            h = node.hostname
            env = dict(envs[h], BKE_AGENT_COMMAND_KEY=command_key)
            # through the launcher, as `bke agent bootstrap`'s unit does (ExecStart=bke-agent-launch):
            # it starts `bke-agent run` from the venv its record selects, so that a lab agent
            # takes an UpdateAgent step (bke_agent.launcher). The PID kept is the launcher's:
            # stopping or killing it stops its agent too (PR_SET_PDEATHSIG), and a new launcher
            # whose agent finds the state lock still held starts it again.
            pids["agents"][h] = forkserver.spawn(self.workdir, f"agent-{h}", [_bin("bke-agent-launch")],
                                                 self.workdir / "logs" / f"agent-{h}.log", env)
        self._save(pids)
        return pids["agents"]

    def ensure_kwok(self, info: RuntimeInfo, plan: Plan) -> int | None:
        """In a real-control-plane lab, the cluster's kwok (bke.lab.kwok); None in a simulated one.
        Idempotent: a running kwok is left alone."""
        if self.mode != "real":
            return None
        pids = self.pids()
        group = pids.setdefault("kwok", {})
        pid = group.get(plan.cluster)
        if pid and pid_alive(pid):
            return pid
        env = dict(_without_keys(os.environ), BKE_REDIS_URL=info.redis_url,
                   BKE_KEY_FILE_API=str(lab_key_file(self.workdir, "api")), BKE_KUBE_CACHE=str(cache_dir()),
                   PYTHONUNBUFFERED="1")
        proc = ManagedProcess.start(f"kwok-{plan.cluster}", [sys.executable, "-m", "bke.lab.kwok", "--cluster", plan.cluster,
                                                             "--out", str(self.workdir / "kwok")],
                                    self.workdir / "logs" / f"kwok-{plan.cluster}.log", env=env)
        group[plan.cluster] = proc.pid
        self._save(pids)
        return proc.pid

    async def wait_services_ready(self, js: JetStreamContext, timeout: float = 60.0) -> None:
        """Ready = every service's durable consumer exists (created once its broker started)."""
        deadline = time.monotonic() + timeout
        for stream, durable in SERVICE_CONSUMERS:
            while True:
                try:
                    await js.consumer_info(stream, durable)
                    break
                except Exception as exc:  # noqa: BLE001 - not created yet
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"service consumer {durable} not ready after {timeout:.0f}s (see {self.workdir}/logs)") from exc
                    await asyncio.sleep(0.05)  # polling under a deadline

    # stop -----------------------------------------------------------------------
    def stop_service(self, name: str, timeout: float = 10.0) -> bool:
        pids = self.pids()
        pid = pids["services"].pop(name, None)
        self._save(pids)
        return stop_pid(pid, timeout) if pid else False

    def stop_agent(self, hostname: str, timeout: float = 15.0) -> bool:
        return bool(self.stop_agents([hostname], timeout))

    def stop_agents(self, hostnames: Iterable[str], timeout: float = 15.0) -> list[str]:
        """Stop these nodes' agents side by side: each is signalled before any is waited for (an
        agent takes seconds to stop its pods and exit). The hostnames whose agent was running."""
        pids = self.pids()
        gone = {h: pids["agents"].pop(h) for h in hostnames if h in pids["agents"]}
        self._save(pids)
        running = {h: pid for h, pid in gone.items() if pid_alive(pid)}
        for pid in running.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in running.values():
            stop_pid(pid, timeout)
        return list(running)

    def down(self) -> list[int]:
        """Stop agents first (they stop their pods), then services, then NATS and Redis."""
        stopped = []
        pids = self.pids()
        everyone = [p for p in [*pids["agents"].values(), *pids["services"].values(), *pids.get("kwok", {}).values(),
                                *pids.get("renewer", {}).values()] if pid_alive(p)]
        for pid in everyone:  # signal all first, so that they stop in parallel
            if pid_alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        for pid in everyone:
            stop_pid(pid, 15.0)
            stopped.append(pid)
        self._save({"services": {}, "agents": {}})
        stopped += forkserver.stop_server(self.workdir)
        stopped += stop_ha(self.workdir / "runtime")  # the cluster's nodes and the sentinels, if any
        stopped += EmbeddedRuntime.stop_workdir(self.workdir / "runtime")
        remove_workdir_network(self.workdir)  # after the agents: their pods ran in it
        return stopped
