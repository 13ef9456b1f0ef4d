"""The install's commands to agents: built per node from the phase table, signed, published, then
recorded as sent, a chunk at a time.

Publish first, then record: a crash in between only publishes the same ids again (JetStream drops
the duplicate; an agent replays a command it completed). Ids are deterministic
(`command_ids.command_id`): a retry bumps the node's generation, a command re-asked after a
restored backup only a suffix of its message id.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from bke.adapters.operation import Publish
from bke.adapters.state.command_signing import Prefetch, SignBytes
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.contracts.agent import AgentCommand, agent_subject
from bke.contracts.install import NodeStepChanged, install_subject
from bke.contracts.operation_ref import OperationKind, OperationRef
from bke.contracts.statuses import CommandStatus, NodeStatus, PhaseNeed
from bke.core.errors import TemporaryError
from bke.core.plan import NodePlan, Plan

from ...command_ids import command_id
from ...phases import NodeInputs, Phase, agent_sealers
from ...ports import Checksums
from ...state import DispatcherState

__all__ = ["SEND_CHUNK", "InstallCommands"]

SEND_CHUNK = 250  # commands built and published per round trip


@dataclass(frozen=True)
class InstallCommands:
    state: DispatcherState
    files: RedisNodeFiles
    checksums: Checksums
    publish: Publish
    notify: Publish  # per-node progress events: many, and advisory
    now: Callable[[], datetime]
    sign: SignBytes  # every command is signed (bke.adapters.state.command_signing): agents run nothing else
    prefetch: Prefetch | None = None  # the bindings of a chunk's commands, read in one round trip

    async def send(self, rid: str, cluster: str, plan: Plan, phase: Phase, batch: list[NodePlan],
                   gens: dict[str, int], start: int | None, again: str = "") -> None:
        """Build, publish and record commands for `batch`; `start` is the phase cursor at
        batch[0] (None for retries, which do not move the cursor). `again`: a suffix of the
        message ids, for commands sent before whose answers were lost (`Installs.reask_in_flight`)."""
        sums = await self.checksums.for_plan(plan) if PhaseNeed.CHECKSUMS in phase.needs else {}
        for i in range(0, len(batch), SEND_CHUNK):
            chunk = batch[i : i + SEND_CHUNK]
            inputs = await self._inputs(cluster, phase, [n.hostname for n in chunk], sums)
            sent, pubs = {}, []
            for node in chunk:
                h, gen, at = node.hostname, gens.get(node.hostname, 0), self.now().isoformat()
                cmd = AgentCommand(
                    command_id=command_id(cluster, phase.slug, h, gen), cluster=cluster, node=h, phase=phase.slug,
                    issued_at=at, steps=phase.build(plan, node, inputs[h]) if phase.build else [],
                    operation=OperationRef(kind=OperationKind.INSTALL, id=rid or "", step=phase.slug),
                )
                body = await self.sign(cmd)  # the signed body, its canonical bytes written once
                sent[h] = {"id": cmd.command_id, "gen": gen, "status": CommandStatus.SENT, "step": "", "stderr": "", "at": at}
                pubs.append(self.publish(body, agent_subject(cluster, h, "command"), {"Nats-Msg-Id": cmd.command_id + again}))
            # publish first, then record: a crash in between only re-publishes the same ids
            await asyncio.gather(*pubs)
            cursor = None if start is None else start + i + len(chunk)
            await self.state.mark_sent(cluster, phase.slug, sent, cursor, self.now().isoformat())
            await asyncio.gather(*(self._running(rid, cluster, h, phase.slug) for h in sent))

    async def _inputs(self, cluster: str, phase: Phase, names: list[str], sums: dict[str, str]) -> dict[str, NodeInputs]:
        """What each node's steps are built from, read for a chunk at once."""
        # only a phase built from them reads (and checks) the rendered files: parsing them was a
        # tenth of the dispatcher's CPU in certs, workers and health at 10,000 nodes
        render = await self.files.get_many(cluster, "render", names) if PhaseNeed.RENDER in phase.needs else {}
        certs = await self.files.get_many(cluster, "certs", names) if PhaseNeed.CERTS in phase.needs else {}
        seals = await agent_sealers(self.files, cluster, names) if PhaseNeed.AGENT_KEYS in phase.needs else {}
        unsealed = [h for h in names if PhaseNeed.CERTS in phase.needs and certs.get(h) is None]
        if unsealed:
            # `certs.sealed` said so, but the bundle is not there (yet): never send a node an
            # empty certificates command; the runner comes back after the delay
            raise TemporaryError(f"no sealed bundle stored for {', '.join(unsealed[:5])}", delay=1.0)
        if self.prefetch is not None:
            await self.prefetch(cluster, names)
        return {h: NodeInputs(render=render.get(h) or [], certs=certs.get(h) or [], checksums=sums, seal=seals.get(h))
                for h in names}

    async def _running(self, rid: str, cluster: str, node: str, slug: str) -> None:
        ev = NodeStepChanged(request_id=rid, cluster=cluster, node=node, phase=slug, status=NodeStatus.RUNNING,
                             at=self.now().isoformat(), step=None, stderr="")
        await self.notify(ev.to_bytes(), install_subject(cluster, "node"), {})
