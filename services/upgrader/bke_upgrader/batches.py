"""A node step's batch carried one decision further (the carrier of every node step: carriers.py):
its nodes cordoned and drained, its commands built and sent, or its nodes uncordoned.

    drain     -> cordon_and_drain through the cluster's API           -> mark_drained | the step fails
    send      -> each node's agent steps (by the step's row of `COMMANDS`, else the upgrade's
                 node commands: bke.core.upgrade.node_commands), handed to the dispatcher,
                 which signs and sends them (bke.contracts.node_commands)   -> mark_sent
    uncordon  -> the nodes that still register uncordoned               -> mark_uncordoned

A batch's commands have fixed ids (bke.core.upgrade.run.upgrade_command_id): one published twice
is dropped by JetStream, and an agent that completed it only replays its answer. A node whose
command cannot be built fails the run naming it (`AtNode`); an outage is tried again by the next
pass (bke.core.upgrade.failure).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bke.contracts.agent import AgentCommand, agent_subject
from bke.contracts.agent_steps import NewFile, UpdateAgent
from bke.contracts.operation_ref import OperationKind, OperationRef
from bke.core.etcdsnap.step import snapshot_step
from bke.core.lifecycle.apply_run import MEMBER_NODE_STEPS, member_commands
from bke.core.upgrade.failure import AtNode, is_transient
from bke.core.upgrade.node_commands import BinariesMemo, node_upgrade_steps, stops_registering
from bke.core.upgrade.run import StepRun, mark_drained, mark_local, mark_sent, mark_uncordoned, upgrade_command_id
from bke.core.upgrade.steps import StepKind, step_kind

from .agent_keys import sealer_for
from .agent_release import NodeUpdates
from .renders import ClusterRenders

if TYPE_CHECKING:
    from .carriers import Carry

__all__ = ["COMMANDS", "COMMAND_TTL_S", "PREFETCH_CHUNK", "RENDERED_STEPS", "SEND_CHUNK", "SEND_YIELD_EVERY", "drained",
           "node_batch", "send_commands"]

log = logging.getLogger("bke.upgrader")
COMMAND_TTL_S = 3600.0
SEND_YIELD_EVERY = 32  # commands built between two turns of the event loop (see send_commands)
PREFETCH_CHUNK = 500  # commands whose bindings are read in one round trip (signed here: see send_commands)
# commands handed to the dispatcher at once: about one message of upgrade commands (a few KB
# each), so that the first agents start while the rest of a big batch is built
SEND_CHUNK = 128
# Steps whose commands carry files of the old and new render (bke.core.upgrade.node_commands), and the
# addons step (the new render's manifests); the others (agents, snapshots, post-checks) need none.
RENDERED_STEPS = frozenset({StepKind.ETCD, StepKind.KUBE_APISERVER, StepKind.KUBE_CONTROLLER_MANAGER,
                            StepKind.KUBE_SCHEDULER, StepKind.LOAD_BALANCER, StepKind.MASTERS_RUNTIME,
                            StepKind.WORKERS, StepKind.CLEANUP, StepKind.ADDONS})


async def node_batch(c: Carry, step: StepRun) -> None:
    """The current batch of a node step, one decision (drain, send or uncordon) further."""
    await _BY_DECISION[c.action](c, step)


async def drained(c: Carry, step: StepRun) -> bool:
    """The batch's nodes cordoned and drained through the cluster's API (with the run's drain
    options); if not, they are uncordoned and the step failed with the reason."""
    hosts = step.current()
    why = await c.up.api.drainer.cordon_and_drain(c.new, hosts, c.run.drain_timeout_s, c.run.drain_options)
    if why:
        # nothing of these nodes changed yet: they take pods again (a failed kubectl drain would
        # leave them cordoned for the operator to uncordon), and the step fails naming why
        await c.up.api.drainer.uncordon(c.new, hosts)
        mark_local(step, False, why)
    return not why


async def _drain(c: Carry, step: StepRun) -> None:
    if await drained(c, step):
        mark_drained(step)


async def _uncordon(c: Carry, step: StepRun) -> None:
    # a node whose kubelet stopped registering stays cordoned until its Node object is
    # deleted (UNREGISTER_STEP): nothing is scheduled onto a Node no kubelet serves
    keep = [h for h in step.current() if not stops_registering(c.old, c.new, h)]
    if keep:
        await c.up.api.drainer.uncordon(c.new, keep)
    mark_uncordoned(step)


async def _send(c: Carry, step: StepRun) -> None:
    hosts = step.current()
    certs = await c.up.certs.files_for(c.run, step.name, step.group, hosts, c.new)
    if isinstance(certs, str):  # nothing sent: the step fails with the reason
        mark_local(step, False, certs)
        return
    await send_commands(c, step, hosts, certs)
    mark_sent(step, c.up.settings.now().timestamp())


_BY_DECISION: dict[str, Callable[[Carry, StepRun], Awaitable[None]]] = {
    "drain": _drain, "send": _send, "uncordon": _uncordon}


@dataclass
class _Batch:
    """What every command of one batch is built from, read once for the batch."""

    now: datetime
    expires: str
    certs: dict[str, list[NewFile]]
    ref: OperationRef  # the operation every command of the batch is part of
    renders: ClusterRenders | None = None
    sums: dict[str, str] = field(default_factory=dict)
    recipient: str = ""  # the snapshot key's public half (etcd-snapshots)
    updates: NodeUpdates | None = None  # each node's UpdateAgent (agents, with a release)
    binaries: BinariesMemo = field(default_factory=dict)  # the same plans and sums for every node


async def _batch(c: Carry, step: StepRun, hosts: list[str], certs: dict[str, list[NewFile]]) -> _Batch:
    cmds, kind = c.up.commands, step_kind(step.name)
    now = c.up.settings.now()
    expires = datetime.fromtimestamp(now.timestamp() + COMMAND_TTL_S, tz=now.tzinfo).isoformat()
    b = _Batch(now, expires, certs, OperationRef(kind=OperationKind.UPGRADE, id=c.run.request_id,
                                                 step=f"{step.name}.{step.group}" if step.group else step.name))
    if kind in RENDERED_STEPS:
        b.renders = await cmds.renders.get(c.run.request_id, c.old, c.new)
    if kind in (StepKind.MASTERS_RUNTIME, StepKind.WORKERS):
        b.sums = await cmds.checksums.for_plan(c.new)
    if kind == StepKind.ETCD_SNAPSHOTS:
        b.recipient = await cmds.snapshots.recipient()
    if kind == StepKind.AGENTS and cmds.release:
        # with a release, each node's UpdateAgent lists the wheels its Python and platform install
        b.updates = await cmds.release.updates(c.run.cluster, hosts)
    return b


async def send_commands(c: Carry, step: StepRun, hosts: list[str], certs: dict[str, list[NewFile]]) -> None:
    """Each node's command of the batch, built and handed to the dispatcher, which signs and
    sends them (bke.contracts.node_commands), SEND_CHUNK at a time."""
    b = await _batch(c, step, hosts, certs)
    send, pending = c.up.commands.send, []
    for i, host in enumerate(hosts):
        try:
            cmd = await _command(c, step, b, host)
            if send is None:  # no dispatcher between (tests that play the agents): signed and sent here
                await _sign_and_publish(c, cmd, hosts, i)
            else:
                pending.append(cmd)
        except Exception as exc:
            if is_transient(exc):
                raise
            raise AtNode(host, exc) from exc
        if send is not None and len(pending) >= SEND_CHUNK:
            await send(b.ref, pending)
            pending = []
        if i % SEND_YIELD_EVERY == SEND_YIELD_EVERY - 1:
            # a publish only queues (nats-py writes from its flusher task): without a turn of
            # the loop a 5,000-node batch was built whole before its first command left, and
            # this process's answer handlers waited for it
            await asyncio.sleep(0)
    if send is not None and pending:
        await send(b.ref, pending)
    log.info("upgrade step %s%s: %d node(s) sent", step.name, f"/{step.group}" if step.group else "", len(hosts),
             extra={"cluster": c.run.cluster, "request_id": c.run.request_id})


async def _command(c: Carry, step: StepRun, b: _Batch, host: str) -> AgentCommand:
    """The node's command of the batch, unsigned. Handed over before the record says sent: a
    crash in between hands the same ids again, which JetStream drops and an agent that completed
    one only replays."""
    run = c.run
    update = b.updates.step(host) if b.updates is not None else None  # a ReleaseError fails this node
    kind = step_kind(step.name)
    build = COMMANDS.get(kind, _upgrade_steps) if kind is not None else _upgrade_steps
    steps = await build(c, step, b, host, update)
    cid = upgrade_command_id(run.cluster, run.request_id, step.name, step.group, host)
    return AgentCommand(command_id=cid, cluster=run.cluster, node=host, phase=f"upgrade:{step.name}",
                        issued_at=b.now.isoformat(), expires_at=b.expires, steps=steps, issuer="upgrader",
                        operation=b.ref)


async def _sign_and_publish(c: Carry, cmd: AgentCommand, hosts: list[str], i: int) -> None:
    cmds = c.up.commands
    assert cmds.sign is not None, "commands are sent through the dispatcher or signed here"
    if cmds.prefetch is not None and i % PREFETCH_CHUNK == 0:
        await cmds.prefetch(cmd.cluster, hosts[i:i + PREFETCH_CHUNK])
    body = await cmds.sign(cmd)
    await cmds.publish(body, agent_subject(cmd.cluster, cmd.node, "command"), {"Nats-Msg-Id": cmd.command_id})


Build = Callable[["Carry", StepRun, _Batch, str, "UpdateAgent | None"], Awaitable[list[Any]]]


async def _snapshot_steps(c: Carry, step: StepRun, b: _Batch, host: str, update: UpdateAgent | None) -> list[Any]:
    # taken from the running members: the plan the cluster runs now
    return [snapshot_step(c.old, step.group, host, b.recipient, b.now, c.run.request_id)]


async def _member_steps(c: Carry, step: StepRun, b: _Batch, host: str, update: UpdateAgent | None) -> list[Any]:
    # a changed spec's etcd membership (bke.core.lifecycle.apply_members)
    return member_commands(step.name, step.group, c.old, c.new, host, c.up.settings.component_timeout_s)


async def _upgrade_steps(c: Carry, step: StepRun, b: _Batch, host: str, update: UpdateAgent | None) -> list[Any]:
    # keepalived.conf (the VRRP password) is sealed to the master's agent; without the stored
    # password there is no keepalived.conf to send (node_commands refuses a secret file with no sealer)
    seal = None
    r = b.renders
    if step.name == StepKind.LOAD_BALANCER and r is not None and c.new.load_balancer:
        if not r.vrrp:
            raise ValueError("the cluster's VRRP password is not in the store (the renderer makes "
                             "it at install): keepalived.conf cannot be rendered")
        seal = await sealer_for(c.up.store.r, c.run.cluster, host)
    return node_upgrade_steps(step.name, step.group, c.old, c.new, host, r.old.get(host, {}) if r else {},
                              r.new.get(host, {}) if r else {}, b.sums, c.up.settings.component_timeout_s,
                              b.certs.get(host, ()), update, binaries_memo=b.binaries, seal=seal)


# step -> how a node's agent steps of it are built, when not by the upgrade's node commands
COMMANDS: dict[StepKind, Build] = {
    StepKind.ETCD_SNAPSHOTS: _snapshot_steps,
    **{kind: _member_steps for kind in MEMBER_NODE_STEPS},
}
