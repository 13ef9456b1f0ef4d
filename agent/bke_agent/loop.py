"""One agent's life on the bus: its durable consumer, registration, heartbeats, and the
handling of each command (run or replay, store, publish, then ack).

Why a push consumer with `max_ack_pending=1`: measured on this 2-core box with 5,000 agents
on one connection (see docs/agent.md), durable consumer set-up costs the same for push
and pull (one API call each, 3-5 s for 5,000 at 64 in flight), but an idle push consumer costs
nothing while 5,000 pull loops keep re-issuing expiring fetches, and a fan-out of one command
per agent arrives ~1.5x faster. `max_ack_pending=1` makes the server hand one command at a
time, in order, so commands of a node never overlap. The consumer's deliver subject is fixed
and lies under the agent's own inbox prefix (`<BKE_NATS_INBOX_PREFIX>.<durable>`, see
`bke.adapters.auth.permissions.agent_deliver_subject`): only this node's identity may subscribe it, and a
restarted agent binds to the same consumer; a second live agent for the same node is refused
(the consumer is already bound). Without an inbox prefix (a server without authentication) it
is `_INBOX.bke-agent.<durable>` as before.

The JetStream API subjects this uses, as nats-py 2.16 spells them (nats/js/manager.py
`add_consumer`: a config with a name and one filter goes to
`$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`; nats/js/client.py `subscribe_bind` only
subscribes the deliver subject; `Msg.ack` publishes to the `$JS.ACK.<stream>.<consumer>...`
reply): exactly what the agent's identity allows (bke.adapters.auth.permissions.agent_permissions).

Trust (verify.py, bke.core.secrets.binding): a command that is not signed by the provisioned
dispatcher key for this node, or is bound to another key of this agent's or to an older
incarnation of its cluster, is refused: a `refused` event on the agent's own subject, the
message terminated, nothing runs. A stale command (outside its validity), an unbound one
this agent no longer takes, or one with a step its kind may not carry (bke.core.host_actions: a
certificates command that writes a unit, a probe of another host...) is refused the same way
unless the journal already holds its id (then step 1 answers it).

Exactly-once effects over at-least-once delivery (the order matters):
    0. authentic, for this node, this agent's key and not an older incarnation?  -> else refuse
    1. a stored result for the id (in its incarnation)?  -> publish it again with replayed=True
       and that incarnation (bke.core.secrets.binding: the new install of a cluster made again drops
       it), ack. Nothing runs.
       Not fresh, or unbound and no longer taken, or a kind its id's operation does not send,
       or a step beyond what its kind may do (bke.core.host_actions: step types, files by
       class, programs, units, probes), or a kubeconfig naming a program (contents.py)?  -> refuse
       (a bound command of a newer incarnation is remembered: binding.py)
    2. run the steps (in-progress acks keep the delivery ours while they run)
    3. store the result (atomic), then log the execution
    4. publish the result (JetStream: stored before we go on)
    5. ack
A crash before 5 means a redelivery, which lands in 1 if 3 happened, else runs again.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import Any, Callable

from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from pydantic import ValidationError

from bke.adapters.bus.message_version import MessageTooNew, message_version, read_as_sent, read_message
from bke.core.errors import MalformedMessage
from bke.contracts.base import schema_headers
from bke.adapters.auth.permissions import agent_deliver_subject
from bke.contracts.agent import (
    AgentCommand,
    AgentHeartbeat,
    AgentRegistered,
    CommandRefused,
    CommandResult,
    agent_subject,
    node_token,
)
from bke.core.errors import is_unavailable
from bke.core.host_actions import command_refusal
from bke.core.secrets.binding import receiver_refusal, served_after, unbound_refusal
from bke.core.secrets.fingerprint import held_ca_fingerprint

from .backends.base import Backend
from .contents import command_kubeconfig_refusal
from .binding import MemoryServed, ServedMemory
from .executor import Executor, utc_now
from .hostfacts import agent_runtime, cgroup_version
from .selfupdate import RestartRequested
from .identity import AgentIdentity
from .outputs import publish_output, result_body
from .journal import ExecutionRecord, Journal
from .settings import AgentSettings
from .trace import CommandTrace
from .verify import CommandVerifier
from .version import RUNNING_VERSION

__all__ = ["AGENT_STREAM", "AgentConflict", "AgentLoop", "consumer_config", "consumer_name"]

log = logging.getLogger("bke.agent")
OPEN_DELIVER_PREFIX = "_INBOX.bke-agent"  # a server without authentication
AGENT_STREAM = "BKE_AGENT"
VERSION = RUNNING_VERSION  # what this agent reports (registration, every result)


class AgentConflict(RuntimeError):
    """Another live agent already consumes this node's commands."""


def consumer_name(cluster: str, node: str) -> str:
    """The node's durable consumer. `__` cannot occur inside a token of a DNS-1123 name."""
    return f"agent__{node_token(cluster)}__{node_token(node)}"


def consumer_config(cluster: str, node: str, ack_wait_s: float, inbox_prefix: str | None = None) -> ConsumerConfig:
    """The node's durable push consumer; commands are pushed under `inbox_prefix` (the agent's own)."""
    name = consumer_name(cluster, node)
    return ConsumerConfig(
        name=name,
        durable_name=name,
        description=f"bke-agent commands of {node} in {cluster}",
        filter_subject=agent_subject(cluster, node, "command"),
        deliver_subject=agent_deliver_subject(inbox_prefix or OPEN_DELIVER_PREFIX, cluster, node),
        deliver_policy=DeliverPolicy.ALL,  # a consumer made after the first command still gets it
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=ack_wait_s,
        max_ack_pending=1,
        max_deliver=-1,  # an agent never gives up on its own node's commands
    )


# A command handed back at a stop is redelivered after this, not at once: at once, it came back
# to the stopping agent's subscription, which handed it back again until it unsubscribed, and the
# delivery in flight then was lost until the ack wait (30 s) ran out; a second later, the
# stopping agent has unsubscribed and the next start (a restart, an update's new agent) gets it.
HANDBACK_DELAY_S = 1.0


class AgentLoop:
    """Consumes one node's commands. Many loops may share one NATS connection (see Fleet)."""

    def __init__(self, nc: NatsClient, js: JetStreamContext, settings: AgentSettings, backend: Backend,
                 journal: Journal, identity: AgentIdentity, *, verifier: CommandVerifier,
                 now: Callable[[], datetime] = utc_now, executor: Executor | None = None,
                 served: ServedMemory | None = None, gate: asyncio.Semaphore | None = None,
                 trace: CommandTrace | None = None) -> None:
        self.nc, self.js, self.settings = nc, js, settings
        # told each command's size when it comes and its result's when it is sent (a fleet's, for
        # bench/install.py's per-phase figures and its same-bytes floor); None: nobody asks
        self.trace = trace
        # shared by the agents of a fleet (fleet.py): how many of them handle a command at once
        self.gate = gate
        # the newest cluster incarnation this agent took a bound command of (binding.py): on
        # disk for a real agent, in memory for a fleet's
        self.served: ServedMemory = served if served is not None else MemoryServed()
        self.backend, self.journal, self.identity, self.now = backend, journal, identity, now
        self.executor = executor or Executor(backend, identity, now=now, keys=verifier.keys)
        self.cluster, self.node = settings.cluster, settings.node
        self.durable = consumer_name(self.cluster, self.node)
        self.executed = 0  # commands really run by this loop
        self.replayed = 0  # redeliveries answered from the journal
        self.refused = 0  # commands refused by the checks of verify.py
        self.verifier = verifier
        self.running_command: str | None = None
        self._ids = {"cluster": self.cluster, "node": self.node}
        self._sub: Any = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False
        self.restart_requested = False
        self.on_restart: Callable[[], None] = lambda: None  # main stops the process with RESTART_EXIT_CODE

    async def ensure_consumer(self) -> ConsumerInfo:
        """Create or update the durable consumer (one API call); refuse if another agent is bound."""
        cfg = consumer_config(self.cluster, self.node, self.settings.ack_wait_s, self.settings.nats_inbox_prefix)
        info = await self.js.add_consumer(AGENT_STREAM, cfg)
        if info.push_bound:
            raise AgentConflict(f"another agent is already consuming the commands of {self.node} in {self.cluster}")
        return info

    async def start(self) -> None:
        """Consumer, backend, subscription, registration, heartbeats."""
        await self.ensure_consumer()
        await self.backend.start()
        cfg = consumer_config(self.cluster, self.node, self.settings.ack_wait_s, self.settings.nats_inbox_prefix)
        self._sub = await self.js.subscribe_bind(AGENT_STREAM, cfg, self.durable, cb=self._on_msg, manual_ack=True)
        await self.register()
        if self.settings.heartbeat_s > 0:
            self._heartbeat = asyncio.create_task(self._heartbeats(), name=f"heartbeat:{self.node}")
        log.info("agent started", extra={**self._ids, "agent_id": self.identity.agent_id, "consumer": self.durable})

    async def register(self) -> None:
        reg = AgentRegistered(cluster=self.cluster, node=self.node, agent_id=self.identity.agent_id,
                              seal_public_key_b64=self.identity.public_key_b64, backend=self.backend.kind,
                              version=VERSION, at=self.now().isoformat(),
                              ca_fingerprint=held_ca_fingerprint(self.settings.root))
        await publish_output(self.js, agent_subject(self.cluster, self.node, "registered"), reg.to_bytes(),
                             retry_s=self.settings.result_retry_s, what="registration", ids=self._ids)

    async def stop(self, grace: float | None = None) -> None:
        """Stop taking commands; let the running one finish within `grace` (else it is
        abandoned and redelivered to the next start); stop the backend."""
        self._stopping = True
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        wait = self.settings.stop_grace_s if grace is None else grace
        try:
            await asyncio.wait_for(self._idle.wait(), wait)
        except TimeoutError:
            log.warning("stopping with a command still running; it will be redelivered",
                        extra={**self._ids, "command_id": self.running_command})
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
        await self.backend.stop()
        log.info("agent stopped", extra={**self._ids, "executed": self.executed, "replayed": self.replayed})

    async def _heartbeats(self) -> None:
        subject = agent_subject(self.cluster, self.node, "heartbeat")
        while True:
            hb = AgentHeartbeat(cluster=self.cluster, node=self.node, agent_id=self.identity.agent_id,
                                at=self.now().isoformat(), running_command=self.running_command,
                                cgroup_version=cgroup_version(self.settings.root),
                                runtime=agent_runtime(RUNNING_VERSION))
            with contextlib.suppress(Exception):  # advisory: a lost heartbeat is not an error
                await self.nc.publish(subject, hb.to_bytes(), headers=schema_headers())
            await asyncio.sleep(self.settings.heartbeat_s)  # the period itself

    async def _on_msg(self, msg: Msg) -> None:
        if self._stopping:
            with contextlib.suppress(Exception):
                await msg.nak(delay=HANDBACK_DELAY_S)
            return
        self._idle.clear()
        try:
            if self.gate is None:
                await self._handle(msg)
            else:
                async with self.gate:
                    await self._handle(msg)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # abandoned at stop: handed back to the next start
                await msg.nak(delay=HANDBACK_DELAY_S)
            raise
        except RestartRequested as exc:  # an UpdateAgent step: the new agent answers this command
            log.info("restarting into the new agent: %s", exc, extra=self._ids)
            self._stopping = True  # a redelivery before the exit is handed back, not run again
            self.restart_requested = True
            with contextlib.suppress(Exception):
                await msg.nak(delay=HANDBACK_DELAY_S)
            self.on_restart()
        except Exception:  # noqa: BLE001 - the callback must never die; redelivery retries
            log.exception("command handling failed; it will be redelivered", extra=self._ids)
            with contextlib.suppress(Exception):
                await msg.nak(delay=2.0)
        finally:
            self.running_command = None
            self._idle.set()

    async def _refuse(self, msg: Msg, command_id: str, reason: str) -> None:
        """Report a command that will not run, on this agent's own subject; never redeliver it."""
        self.refused += 1
        log.warning("command refused: %s", reason, extra={**self._ids, "command_id": command_id})
        ev = CommandRefused(cluster=self.cluster, node=self.node, agent_id=self.identity.agent_id,
                            command_id=command_id[:256], reason=reason[:500], at=self.now().isoformat())
        await publish_output(self.js, agent_subject(self.cluster, self.node, "refused"), ev.to_bytes(),
                             retry_s=self.settings.result_retry_s, what="refusal", ids=self._ids)
        await msg.term()

    async def _handle(self, msg: Msg) -> None:
        try:
            # in the form its bke-schema header names (bke.adapters.bus.message_version): a command from a
            # newer dispatcher is refused with the reason, never misread
            version = message_version(msg.headers)
            cmd = read_message(AgentCommand, msg.data, version)
        except MessageTooNew as exc:
            await self._refuse(msg, "", str(exc))
            return
        except MalformedMessage as exc:
            cause = exc.__cause__
            errors = cause.error_count() if isinstance(cause, ValidationError) else 1
            await self._refuse(msg, "", f"malformed command: {errors} error(s)")
            return
        ids = {**self._ids, "command_id": cmd.command_id, "phase": cmd.phase}
        if self.trace is not None:
            self.trace.received(cmd.phase, self.node, len(msg.data))
        # the body as sent, when the command was read from it unconverted: its signed bytes
        # are then checked as they are (verify.py)
        why = self.verifier.authentic(cmd, msg.data if read_as_sent(AgentCommand, version) else None, self.now())
        agent_id = self.identity.agent_id
        if why is None:
            # for this agent's key and not an older incarnation of its cluster: checked before the
            # journal, so that such a replay is not even answered from it (bke.core.secrets.binding)
            why = receiver_refusal(cmd, agent_id, self.served.load())
        if why is not None:
            await self._refuse(msg, cmd.command_id, why)
            return
        stored = self.journal.get(cmd.command_id, cmd.incarnation or "")
        if stored is not None:
            # the incarnation it was stored under (a result stored before results carried one has none)
            result = stored.model_copy(update={"replayed": True, "incarnation": cmd.incarnation,
                                                 "operation": cmd.operation})
            self.replayed += 1
        else:
            served = self.served.load()
            why = (self.verifier.fresh(cmd, self.now()) or unbound_refusal(cmd, agent_id, served, self.identity.made_at)
                   # within what its kind may do to the node (bke.core.host_actions), checked on every step before any runs
                   or command_refusal(cmd, self.settings.ip)
                   # no kubeconfig of it names a program, checked on every file's clear bytes before any step runs
                   or command_kubeconfig_refusal(cmd, self.identity))
            if why is not None:
                await self._refuse(msg, cmd.command_id, why)
                return
            if (newer := served_after(cmd, agent_id, served)) is not None:
                self.served.save(newer)  # before the run: a crash in it leaves what the run would
            result = await self._execute(msg, cmd)
        size = await self._publish_result(result)
        if self.trace is not None:
            self.trace.answered(cmd.phase, self.node, size)
        await self._ack(msg)
        log.info("command %s%s", result.status, " (replayed)" if result.replayed else "",
                 extra={**ids, "status": result.status, "replayed": result.replayed})

    async def _publish_result(self, result: CommandResult) -> int:
        """Send the result, trying again for about `result_retry_s` (settings) while NATS is away
        or the outputs' stream is full (outputs.py). Why: when a NATS node of a cluster is lost,
        the stream elects a new leader and a publish gets no answer for a few seconds; handing
        the command back at once would wait for its ack wait (30 s) before the journal answers
        it. The result is in the journal already, and the dispatcher takes a result twice as
        once, so sending it again is safe. Every result goes to the dispatcher, which sends the
        upgrader's on (by the operation the result echoes: bke.contracts.operation_ref). Returns
        the body's size."""
        body = result_body(result)
        await publish_output(self.js, agent_subject(self.cluster, self.node, "result"), body,
                             retry_s=self.settings.result_retry_s, what="result",
                             ids={**self._ids, "command_id": result.command_id})
        return len(body)

    async def _ack(self, msg: Msg) -> None:
        """Ack, and wait for the server to confirm it, for about `result_retry_s` (settings). Why: a plain ack
        is one message nobody answers; sent while the consumer elects a new leader (a NATS node
        lost) it is gone, and with one command in flight per agent (max_ack_pending=1) the node
        would wait a whole ack wait (30 s) for the redelivery before its next command. If the
        server never confirms, the redelivery is answered from the journal: nothing runs twice."""
        delay, waited = 0.25, 0.0
        while True:
            try:
                await msg.ack_sync(timeout=2.0)
                return
            except Exception as exc:
                if not (is_unavailable(exc) or isinstance(exc, NoRespondersError)):
                    raise  # a bug, not NATS being away: the delivery is handed back (_on_msg)
                if waited >= self.settings.result_retry_s:
                    log.warning("ack not confirmed (NATS: %s); the redelivery will be answered from the journal",
                                type(exc).__name__, extra=self._ids)
                    return
            await asyncio.sleep(delay)  # backoff while the consumer elects a leader
            waited += delay
            delay = min(2 * delay, 2.0)

    async def _execute(self, msg: Msg, cmd: AgentCommand) -> CommandResult:
        self.running_command = cmd.command_id
        # In-progress acks only for commands that outlive a third of ack_wait: a timer is
        # cheap, a task per command is not (thousands of agents share this event loop).
        keep: list[asyncio.Task[None]] = []
        timer = asyncio.get_running_loop().call_later(
            self.settings.ack_wait_s / 3, lambda: keep.append(asyncio.create_task(self._keep_alive(msg))))
        try:
            result = await self.executor.run(cmd)
        finally:
            timer.cancel()
            for task in keep:
                task.cancel()
            await asyncio.gather(*keep, return_exceptions=True)
        self.journal.put(result, incarnation=cmd.incarnation or "", expires_at=cmd.expires_at)
        self.journal.record_execution(ExecutionRecord.of(result, cmd.phase))
        self.executed += 1
        return result

    async def _keep_alive(self, msg: Msg) -> None:
        """In-progress acks while a long command runs, so the server does not redeliver it."""
        while True:
            with contextlib.suppress(Exception):
                await msg.in_progress()
            await asyncio.sleep(self.settings.ack_wait_s / 3)  # the period itself
