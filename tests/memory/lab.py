"""A whole deployment in one process: the five services from their composition roots on the
in-memory bus and one FakeServer, and a fleet of real agent loops (bke_agent.loop.AgentLoop: the
signature, binding and freshness checks, the journal, results and refusals are the agent's own
code) whose steps are the bench's NullBackend, or fail as a test chooses (fleet.py).

An operation is started as an operator starts it (its request on the bus) and waited on by
what the services say (its finished event), never by time.
"""
from __future__ import annotations

import importlib
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import fakeredis
import pytest

from bke.adapters.bus.service import Service
from bke.adapters.state.state_init import ensure_state
from bke.contracts.base import Message, schema_headers
from bke.core.plan import Plan, plan_spec_text
from bke.core.secrets import SecretBox, box_for
from bke.core.secrets.record_signing import WRITERS
from bke_agent.command_keys import AgentKeyring
from bke_agent.identity import AgentIdentity
from bke_agent.journal import MemoryJournal
from bke_agent.loop import AgentLoop
from bke_agent.settings import AgentSettings
from bke_agent.verify import CommandVerifier
from tests.trust_helpers import deployment_key, provision

from .bus import WAIT_S, Recorded, Router
from .fleet import Fault, FaultyBackend
from .services import NATS_URL, REDIS_URL, patch_outside

__all__ = ["Fault", "MemoryLab", "SEED", "SERVICES", "hostnames", "plan_of", "spec", "worker"]

# each service: its package, its settings class, and what the tier sets (a lab's stand-ins for
# the cluster's API; no periodic rounds, whose timers would outlive a test)
SERVICES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "planner": ("bke_planner", "PlannerSettings", {}),
    "certs": ("bke_certs", "CertsSettings", {"renew_interval_s": 0}),
    "renderer": ("bke_renderer", "RendererSettings", {}),
    "dispatcher": ("bke_dispatcher", "DispatcherSettings", {"owner": "memory-dispatcher", "mode": "lab",
                                                            "health_interval_s": 0}),
    "upgrader": ("bke_upgrader", "UpgraderSettings", {"owner": "memory-upgrader", "mode": "lab"}),
}


def _made(name: str) -> Service:
    """The service `name` as its composition root makes it (`<package>.app.create_service`)."""
    package, settings_class, extra = SERVICES[name]
    settings = getattr(importlib.import_module(f"{package}.settings"), settings_class)
    create: Callable[[Any], Service] = importlib.import_module(f"{package}.app").create_service
    return create(settings(nats_url=NATS_URL, redis_url=REDIS_URL, **extra))


class MemoryLab:
    def __init__(self, monkeypatch: pytest.MonkeyPatch, box: SecretBox, scratch: Path):
        self.router, self.server, self.box, self.scratch = Router(), fakeredis.FakeServer(), box, scratch
        patch_outside(monkeypatch, self.router, self.server)
        self.redis = fakeredis.FakeAsyncRedis(server=self.server)  # the test's own client
        self.nc = self.router.connect()  # the operator's connection
        self.services: dict[str, Service] = {}
        self.agents: dict[str, AgentLoop] = {}

    async def start(self, names: Iterable[str] = SERVICES) -> None:
        """The state initialised (`bke state init`: epoch, snapshot, signing and record keys), then
        each service made and started."""
        admin = fakeredis.FakeRedis(server=self.server)
        ensure_state(admin, box_for("snapshot"), signing_box=box_for("signing"),
                     record_boxes={w: box_for(w) for w in WRITERS})
        admin.close()
        for name in names:
            svc = _made(name)
            await svc.start()
            self.services[name] = svc

    async def add_agents(self, cluster: str, nodes: Iterable[str], faults: list[Fault] | None = None,
                         verify_key: Any = None) -> dict[str, AgentLoop]:
        """One agent per node, provisioned (its key recorded, as `bke agent provision` does) and
        running the commands the deployment's key signed (or `verify_key`'s: a node whose agent
        trusts another key refuses every command)."""
        key = (await deployment_key(self.redis, self.box)).verify_key
        loops = {}
        for node in nodes:
            settings = AgentSettings(cluster=cluster, node=node, backend="host", nats_url=NATS_URL, heartbeat_s=0)
            trusted = verify_key if verify_key is not None else key
            verifier = CommandVerifier(trusted, cluster, node, AgentKeyring.load(trusted, None, False))
            backend, identity = FaultyBackend(node=node, faults=faults or []), AgentIdentity.ephemeral()
            backend.take_snapshots(self.nc.jetstream(), self.scratch / node, cluster, identity)
            loops[node] = AgentLoop(self.nc, self.nc.jetstream(), settings, backend, MemoryJournal(), identity,
                                    verifier=verifier)
        await provision(self.redis, cluster, {n: loop.identity for n, loop in loops.items()})
        for loop in loops.values():
            await loop.start()
        self.agents.update(loops)
        return loops

    def fail(self, fault: Fault) -> None:
        """From now on, `fault.node`'s agent fails the steps `fault` names."""
        backend = self.agents[fault.node].backend
        assert isinstance(backend, FaultyBackend)
        backend.faults.append(fault)

    async def heartbeats(self) -> None:
        """One heartbeat of every agent, as its loop beats (the upgrade's checks want live agents):
        the loop's own period is not run, so that no timer outlives a test."""
        from bke.contracts.agent import AgentHeartbeat, agent_subject

        for loop in self.agents.values():
            beat = AgentHeartbeat(cluster=loop.cluster, node=loop.node, agent_id=loop.identity.agent_id,
                                  at=loop.now().isoformat())
            await self.nc.publish(agent_subject(loop.cluster, loop.node, "heartbeat"), beat.to_bytes(),
                                  headers=schema_headers())
        await self.router.quiet()

    async def send(self, subject: str, message: Message) -> int:
        """Publish as the operator's CLI does; the index in the log from which to wait for answers."""
        mark = len(self.router.log)
        await self.nc.jetstream().publish(subject, message.to_bytes(), headers=schema_headers({"Nats-Msg-Id": uuid.uuid4().hex}))
        return mark

    async def wait(self, subject: str, check: Callable[[dict[str, Any]], bool] = lambda d: True,
                   timeout: float = WAIT_S, start: int = 0) -> dict[str, Any]:
        import json

        got: Recorded = await self.router.wait_for(subject, lambda m: check(json.loads(m.data)), timeout, start)
        doc: dict[str, Any] = json.loads(got.data)
        return doc

    async def status(self, cluster: str) -> dict[str, Any]:
        """`bke status NAME -o json`: the dispatcher's answer to a core request."""
        import json

        from bke.contracts.status import STATUS_GET, GetStatus

        reply = await self.nc.request(STATUS_GET, GetStatus(cluster=cluster, nodes="all").to_bytes(), timeout=5.0)
        doc: dict[str, Any] = json.loads(reply.data)
        return doc

    async def install(self, cluster: str, text: str, faults: list[Fault] | None = None, **agents: Any) -> dict[str, Any]:
        """Agents for every node of `text`, then the install (`bke apply` of a new cluster): its finished event."""
        from bke.contracts import INSTALL_CLUSTER, InstallCluster
        from bke.contracts.install import install_subject
        await self.add_agents(cluster, hostnames(text), faults, **agents)
        mark = await self.send(INSTALL_CLUSTER, InstallCluster(request_id=uuid.uuid4().hex, spec=text))
        return await self.wait(install_subject(cluster, "finished"), start=mark)

    async def apply(self, cluster: str, text: str) -> dict[str, Any]:
        """`bke apply` of an installed cluster: the run's view once it ended, as its changed events say."""
        from bke.contracts.apply import APPLY_CLUSTER, ApplyCluster
        from bke.contracts.upgrade import upgrade_subject

        mark = await self.send(APPLY_CLUSTER, ApplyCluster(request_id=uuid.uuid4().hex, cluster=cluster, spec=text))
        done = await self.wait(upgrade_subject(cluster), lambda d: d["upgrade"]["status"] in ("Succeeded", "Failed"),
                               start=mark)
        view: dict[str, Any] = done["upgrade"]
        return view

    def executed(self) -> int:
        return sum(loop.executed for loop in self.agents.values())

    async def stop(self) -> None:
        for loop in self.agents.values():
            await loop.stop(grace=1.0)
        for svc in reversed(list(self.services.values())):
            await svc.stop()
        await self.router.close()
        await self.redis.aclose()


SEED = "examples/seed-3m1w.yaml"


def plan_of(text: str) -> Plan:
    plan = plan_spec_text(text).plan
    assert plan is not None, "the spec does not place"
    return plan


def hostnames(text: str) -> list[str]:
    return [n.hostname for n in plan_of(text).nodes]


def spec(name: str, path: str = SEED) -> str:
    return Path(path).read_text().replace("name: seed", f"name: {name}")


def worker(hostname: str, ip: str) -> str:
    """One more BKENode document for a spec: a worker."""
    return (f"\n---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: seed-{hostname}}}\n"
            f"spec: {{hostname: {hostname}, ip: {ip}, role: [node]}}\n")
