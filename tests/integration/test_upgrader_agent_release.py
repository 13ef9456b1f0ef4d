"""The agents step with an agent release, on real Redis and NATS: the upgrader's own `Upgrades`
(bke_upgrader.operation) runs a stored upgrade of the split-etcd example with a bundle-shaped
release (every Python and arch), each node's runtime where the dispatcher records it from the
heartbeats (`bke:<c>:heartbeat:runtime`), answered by the dispatcher's own handler (the agents'
facts). Each node's signed command must list only the wheels
its Python and arch install (an aarch64 3.12 node other ones than the x86_64 3.11 nodes); a node
whose agent reported no runtime fails the step naming it and gets no command."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from nats.aio.client import Client as NatsClient
from redis import asyncio as aioredis

from bke.contracts.agent import AgentCommand, AgentRuntime
from bke.contracts.agent_steps import CheckHost, UpdateAgent
from bke.adapters.state.keys.dispatcher import heartbeat_runtime_key
from bke_upgrader.agent_facts import AgentFactsClient
from bke_upgrader.agent_release import ReleaseSource
from bke_upgrader.operation import Upgrades
from bke_upgrader.ports import ClusterApi, Commands, Records, RunSettings
from bke_upgrader.renders import Renders
from bke_upgrader.store import UpgradeStore
from bke.adapters.state import PlanCache, RedisPlanStore
from tests.agent_facts_helpers import with_agent_facts

from ..unit.upgrade_helpers import SPLIT, plan_of
from .test_upgrader_permanent_failure import _now, _stored_run

pytestmark = pytest.mark.integration
NAMES = ("bke-0.2.0-py3-none-any.whl",
         "wheels/pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
         "wheels/pydantic_core-2.50.5-cp312-cp312-manylinux2014_aarch64.manylinux_2_17_aarch64.whl",
         "wheels/pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
         "wheels/nats_py-2.16.0-py3-none-any.whl")
X86 = AgentRuntime(agent_version="0.1.0", python="3.11", machine="x86_64", libc="glibc", libc_version="2.36")
ARM = AgentRuntime(agent_version="0.1.0", python="3.12", machine="aarch64", libc="glibc", libc_version="2.39")


def _bundle(root: Path) -> str:
    index = {"bundleVersion": 1, "agent": {"dir": "agent/0.2.0", "pythons": ["3.11", "3.12"]},
             "files": [{"path": f"agent/0.2.0/{n}", "sha256": f"{i:064x}"} for i, n in enumerate(NAMES)]}
    (root / "bundle.json").write_text(json.dumps(index))
    return str(root)


async def _agents_step(redis: aioredis.Redis, nc: NatsClient, tmp_path: Path, runtimes: dict[str, AgentRuntime]
                       ) -> tuple[dict[str, AgentCommand], UpgradeStore, str]:
    """One reconcile of the stored run (the agents step sends to every node: max-unavailable
    100%); the commands signed, by node, the store, and the outcome's reason."""
    plan = plan_of(SPLIT)
    store = await _stored_run(redis, plan)
    for host, rt in runtimes.items():
        await redis.hset(heartbeat_runtime_key(plan.cluster), host, rt.model_dump_json(by_alias=True))
    signed: dict[str, AgentCommand] = {}

    async def sign(cmd: AgentCommand) -> bytes:
        signed[cmd.node] = cmd
        return cmd.to_bytes()

    async def publish(payload: bytes, subject: str, headers: dict[str, str]) -> None:
        await nc.publish(subject, payload, headers=headers or None)

    upgrades = Upgrades(Records(store, PlanCache(redis), RedisPlanStore(redis), None),  # type: ignore[arg-type]
                        Commands(publish, sign, Renders(), None, None,  # type: ignore[arg-type]
                                 release=ReleaseSource(_bundle(tmp_path), 60.0,
                                                       AgentFactsClient(with_agent_facts(redis), 1.0))),
                        ClusterApi(None, None), RunSettings("release-test", 30_000, _now))  # type: ignore[arg-type]
    outcome = await upgrades.reconcile(plan.cluster)
    return signed, store, outcome.reason


def _wheels(cmd: AgentCommand) -> list[str]:
    update = cmd.steps[0]
    assert isinstance(update, UpdateAgent) and isinstance(cmd.steps[1], CheckHost)
    assert update.version == "0.2.0" and update.confirm_timeout_s == 60.0
    return [w.url.rsplit("/", 1)[1] for w in update.wheels]


async def test_each_node_is_sent_the_wheels_of_its_python_and_arch(redis_client: aioredis.Redis,
                                                                   nats_client: NatsClient, tmp_path: Path) -> None:
    hosts = [n.hostname for n in plan_of(SPLIT).nodes]
    arm = hosts[-1]
    signed, _, _ = await _agents_step(redis_client, nats_client, tmp_path,
                                      {h: ARM if h == arm else X86 for h in hosts})
    assert sorted(signed) == sorted(hosts)
    assert _wheels(signed[hosts[0]]) == [  # in the index's order (by path)
        "bke-0.2.0-py3-none-any.whl", "nats_py-2.16.0-py3-none-any.whl",
        "pydantic_core-2.50.5-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"]
    assert _wheels(signed[arm])[2] == "pydantic_core-2.50.5-cp312-cp312-manylinux2014_aarch64.manylinux_2_17_aarch64.whl"
    sha = {w.url.rsplit("/", 1)[1]: w.sha256 for w in signed[arm].steps[0].wheels}  # type: ignore[union-attr]
    assert sha["nats_py-2.16.0-py3-none-any.whl"] == f"{4:064x}"  # each with the digest the index records


async def test_a_node_without_a_reported_runtime_fails_the_step_naming_it(redis_client: aioredis.Redis,
                                                                          nats_client: NatsClient,
                                                                          tmp_path: Path) -> None:
    hosts = [n.hostname for n in plan_of(SPLIT).nodes]
    silent = hosts[1]
    signed, store, reason = await _agents_step(redis_client, nats_client, tmp_path,
                                               {h: X86 for h in hosts if h != silent})
    assert silent not in signed and hosts[0] in signed
    assert f"agents: node {silent}:" in reason and "has not reported its Python and platform" in reason, reason
    run = await store.load(plan_of(SPLIT).cluster)
    assert run is not None and run.status == "Failed"
    assert [f.hostname for f in run.failed] == [silent]
    assert datetime.now(timezone.utc) >= datetime.fromisoformat(run.finished_at)
