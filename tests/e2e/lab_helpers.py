"""End-to-end scaffolding: a lab (real NATS, Redis, etcd; every service and agent a process)
in a temp dir, driven the way `bke lab install` drives it."""
from __future__ import annotations

import asyncio
import base64
import io
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import httpx
import yaml
from rich.console import Console

from bke.adapters.auth.permissions import identity_name, inbox_prefix
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.lab.identities import creds_path
from bke.lab.supervisor import LabSupervisor
from bke.core.plan import Plan, plan_spec_text
from bke.adapters.runtime import mtls_context
from bke_agent.journal import read_executions
from bke_agent.settings import LAB_STATE_SUBDIR
from bke_cli.install_follow import submit_and_follow
from bke_cli.status_client import StatusUnavailable, get_status

__all__ = ["Lab"]


class Lab:
    def __init__(self, workdir: Path, spec_path: Path, fetch: bool = False, control_plane: str = "simulated"):
        self.workdir = workdir
        self.spec_path = spec_path
        self.spec = spec_path.read_bytes()
        self.plan: Plan = plan_spec_text(self.spec).plan  # type: ignore[assignment]
        # fetch: download from the spec's httpRepo; control_plane "real": built binaries and kwok
        self.sup = LabSupervisor(workdir, fetch=fetch, control_plane=control_plane)
        self.info = self.sup.ensure_runtime()
        self.access = self.sup.operator_access(self.info)  # NATS with authentication: the CLI's identity
        self.out = io.StringIO()

    def agent_access(self, hostname: str) -> BusAccess:
        """A node's agent identity (what an attacker who stole that node's creds file would have)."""
        name = identity_name("agent", self.plan.cluster, hostname)
        return BusAccess(self.info.nats_url, creds_path(self.sup.workdir, name), inbox_prefix(name))

    def operator_env(self) -> dict[str, str]:
        """BKE_NATS_CREDS / BKE_NATS_INBOX_PREFIX for a `bke ... --nats URL` subprocess."""
        assert self.access.creds is not None and self.access.inbox_prefix
        return {"BKE_NATS_CREDS": str(self.access.creds), "BKE_NATS_INBOX_PREFIX": self.access.inbox_prefix}

    def start(self, agents: bool = True) -> "Lab":
        self.sup.ensure_services(self.info)
        if agents:
            self.sup.ensure_agents(self.info, self.plan)
            self.sup.ensure_kwok(self.info, self.plan)
        return self

    async def install(self, timeout: float = 240.0, submit: bool = True) -> int:
        console = Console(file=self.out, width=200, force_terminal=False)
        return await submit_and_follow(
            self.access, self.spec, self.plan.cluster, timeout, console, submit=submit
        )

    async def status(self) -> dict[str, Any] | None:
        """The dispatcher's status reply (every node), as the wire document; None while the
        dispatcher does not answer (e.g. restarting) or has no install yet."""
        nc = await connect_nats(self.access)
        try:
            doc = await get_status(nc, self.plan.cluster, "all")
        except StatusUnavailable:
            return None
        finally:
            await nc.close()
        return None if doc is None else doc.model_dump(by_alias=True, mode="json")

    async def wait_status(self, predicate: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            doc = await self.status()
            if doc and predicate(doc):
                return doc
            await asyncio.sleep(0.05)  # polling the status under a deadline
        raise AssertionError(f"timed out waiting for {what}; last status: {doc}")

    def phase(self, doc: dict[str, Any], name: str) -> dict[str, Any]:
        return next(p for p in doc["phases"] if p["name"] == name)

    def host(self, hostname: str) -> Path:
        return self.workdir / "hosts" / hostname

    def executions(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for node in self.plan.nodes:
            for rec in read_executions(self.host(node.hostname) / LAB_STATE_SUBDIR):
                counts[rec.commandId] += 1
        return counts

    def manifest(self, hostname: str, name: str) -> dict[str, Any]:
        return yaml.safe_load((self.host(hostname) / "etc/kubernetes/manifests" / name).read_text())

    def down(self) -> None:
        self.sup.down()


async def etcd_members(url: str, tls: tuple[Path, Path, Path]) -> list[dict[str, Any]]:
    """The member list of the etcd cluster served at `url` (linearizable), with a client certificate."""
    async with httpx.AsyncClient(verify=mtls_context(*(str(p) for p in tls)), trust_env=False, timeout=5.0) as http:
        r = await http.post(f"{url}/v3/cluster/member/list", json={"linearizable": True})
        return list(r.json()["members"])


async def assert_reads_back(url: str, tls: tuple[Path, Path, Path], keys: dict[str, str]) -> None:
    """Every key of `keys` holds its value when read through the etcd member at `url`."""
    async with httpx.AsyncClient(verify=mtls_context(*(str(p) for p in tls)), trust_env=False, timeout=5.0) as http:
        for k, v in keys.items():
            resp = await http.post(f"{url}/v3/kv/range", json={"key": base64.b64encode(k.encode()).decode()})
            kvs = resp.json().get("kvs") or []
            assert kvs and base64.b64decode(kvs[0]["value"]).decode() == v, (url, k)


async def kill_upgrader_once(lab: Any, record: str, parts: str, started: Callable[[dict[str, Any]], bool],
                             what: str) -> None:
    """SIGKILL the upgrader once a part of its running operation has started (`started` true of
    one of the record's `parts`: an upgrade's steps, a restore's stages), then start it again: the
    run must go on from its record."""
    import json

    from redis.asyncio import Redis

    from bke.adapters.runtime.processes import pid_alive, stop_pid

    r = Redis.from_url(lab.info.redis_url, decode_responses=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            raw = await r.get(f"bke:{lab.plan.cluster}:{record}")
            if raw and any(started(p) for p in json.loads(raw)[parts]):
                break
            await asyncio.sleep(0.05)  # polling the record under a deadline
        else:
            raise AssertionError(f"{what} never started")
    finally:
        await r.aclose()
    pid = lab.sup.pids()["services"]["upgrader"]
    stop_pid(pid, timeout=0.0)  # SIGTERM then SIGKILL: killed mid-way
    assert not pid_alive(pid)
    lab.sup.ensure_services(lab.info, only=("upgrader",))
