"""Every command to an agent is signed: the dispatcher's (install phases, health rounds,
rotations) and the upgrader's.

The key is the deployment's one command-signing key (bke.core.secrets.signing), read from Redis on
first use and kept in memory: every replica signs with the same key, and a replica started
before the key existed makes it (`SET NX`: concurrent makers agree on one key). Loaded lazily so
that the service starts (and reports readiness) before the operator key is needed.

Read again when it changes, without a restart: at most every RELOAD_S a sign reads the stored
blob (one GET) and decrypts it only if its bytes changed. Why: a rollover's switch
(`bke keys command-key switch`, bke.adapters.state.command_key_rotation) replaces the stored
key, and every dispatcher and upgrader replica must follow; agents trust both keys during the
overlap, so a replica that signs with the old key for a few more seconds is still obeyed. A
re-encryption of the record (`bke keys rotate signing`) changes its bytes but not the key.

Every command is bound to its receiver (bke.core.secrets.binding) from three records, each written
by its owner and only read here:

    bke:<c>:plan-meta          `incarnation` (planner, with the cluster's first plan)
    bke:<c>:agents:provisioned the node's provisioned key id (certs, at `bke agent provision`)
    bke:<c>:heartbeat:runtime  whether the node's agent reads bound commands (dispatcher, from
                               its heartbeats)

Read when a command is signed, never kept: a node provisioned again must be sent commands for
its new key at once (an agent refuses one for its old key, and a refused command is not sent
again). A sender of many commands at once (an install phase's chunk, a health round, an upgrade
step's batch) reads them for the whole chunk in one round trip first (`prefetch`); each read
binding then serves that node's next command, within PREFETCH_S. Why: a round trip costs the
signer more CPU than the signature (redis-py, about 200-300 us against about 120 us for a
4.7 KB command, bench/command_binding.py), 15,000 times in a 5,000-node upgrade.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Awaitable, Callable

from pydantic import ValidationError
from redis.asyncio import Redis

from bke.contracts.agent import AgentCommand, AgentRuntime, ProvisionAgent
from bke.core.errors import PermanentError
from bke.core.secrets import SecretBox
from bke.core.secrets.binding import Binding, binding_for
from bke.core.secrets.signing import CommandSigner, ensure_command_key, sign_command, signed_command_bytes
from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.certs import provisioned_agents_key
from bke.adapters.state.keys.dispatcher import heartbeat_runtime_key
from bke.adapters.state.keys.trust import command_signing_key
from bke.adapters.state.plans import INCARNATION_FIELD

__all__ = ["CommandSigning", "PREFETCH_S", "Prefetch", "RELOAD_S", "Sign", "SignBytes", "read_bindings"]

Sign = Callable[[AgentCommand], Awaitable[AgentCommand]]  # what publishers of commands are given
# ... or, where the signed model is not needed, the body to publish (signing.signed_command_bytes)
SignBytes = Callable[[AgentCommand], Awaitable[bytes]]
# (cluster, nodes): read the bindings of the commands about to be signed for these nodes
Prefetch = Callable[[str, Sequence[str]], Awaitable[None]]
log = logging.getLogger("bke.command_signing")
PREFETCH_S = 10.0  # a prefetched binding serves a command signed within this; later ones read again
RELOAD_S = 5.0  # how stale the signing key may be after a switch (see the module docstring)


def _text(raw: object) -> str | None:
    return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


def _blob(raw: bytes | str | None) -> bytes | None:
    return raw.encode() if isinstance(raw, str) else raw


def _agent_id(raw: object) -> str | None:
    try:
        return None if raw is None else ProvisionAgent.model_validate_json(raw).agent_id  # type: ignore[arg-type]
    except ValidationError:
        return None  # not a record certs wrote: as if none were provisioned


def _binds(raw: object) -> int | None:
    try:
        return None if raw is None else AgentRuntime.model_validate_json(raw).command_binding  # type: ignore[arg-type]
    except ValidationError:
        return None  # not a runtime the dispatcher wrote: as if none were recorded


async def read_bindings(redis: Redis, cluster: str, nodes: Sequence[str]) -> dict[str, Binding | None]:
    """node -> the binding of a command for it (None: sent unbound; see the module docstring),
    in one round trip."""
    if not nodes:
        return {}
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hget(plan_meta_key(cluster), INCARNATION_FIELD)
        pipe.hmget(provisioned_agents_key(cluster), list(nodes))
        pipe.hmget(heartbeat_runtime_key(cluster), list(nodes))
        incarnation, provisioned, runtimes = await pipe.execute()
    inc = _text(incarnation)
    return {node: binding_for(_agent_id(p), inc, _binds(rt)) for node, p, rt in zip(nodes, provisioned, runtimes)}


class CommandSigning:
    def __init__(self, redis: Redis, box_factory: Callable[[], SecretBox],
                 clock: Callable[[], float] = time.monotonic, reload_s: float = RELOAD_S) -> None:
        self.redis, self.box_factory, self.clock, self.reload_s = redis, box_factory, clock, reload_s
        self._signer: CommandSigner | None = None
        self._blob: bytes | None = None  # the stored form `_signer` was read from
        self._checked = 0.0  # clock() when the stored blob was last compared
        self._lock = asyncio.Lock()
        self._ahead: dict[tuple[str, str], tuple[float, Binding | None]] = {}  # (cluster, node) -> (read at, binding)

    async def signer(self) -> CommandSigner:
        """The stored key: made on first use, read again when its record changed (RELOAD_S)."""
        if self._signer is not None and self.clock() - self._checked < self.reload_s:
            return self._signer
        async with self._lock:
            if self._signer is None or self.clock() - self._checked >= self.reload_s:
                blob = _blob(await self.redis.get(command_signing_key()))
                if blob is None and self._signer is None:  # made once for the deployment (SET NX)
                    await ensure_command_key(self.redis, command_signing_key(), self.box_factory())
                    blob = _blob(await self.redis.get(command_signing_key()))
                if blob is not None and blob != self._blob:  # decrypted only when it changed
                    opened = self._opened(blob)
                    if opened is not self._signer:  # else kept: the record is tried again at the next check
                        self._signer, self._blob = opened, blob
                self._checked = self.clock()
        assert self._signer is not None
        return self._signer

    def _opened(self, blob: bytes) -> CommandSigner:
        """The stored key; while a changed record does not open with this process's `signing`
        keys (its key file not given yet), the key in use is kept and the record tried again."""
        try:
            return CommandSigner.from_store(blob, self.box_factory())
        except PermanentError as exc:
            if self._signer is None:
                raise
            log.warning("the stored command-signing key changed but does not open here (%s); signing with key %s "
                        "until it does", type(exc).__name__, self._signer.key_id)
            return self._signer

    async def prefetch(self, cluster: str, nodes: Sequence[str]) -> None:
        """Read the bindings of the commands about to be signed for `nodes` (one round trip);
        each serves that node's next command signed within PREFETCH_S."""
        now = self.clock()
        self._ahead = {k: v for k, v in self._ahead.items() if now - v[0] < PREFETCH_S}  # none kept for long
        for node, binding in (await read_bindings(self.redis, cluster, nodes)).items():
            self._ahead[(cluster, node)] = (now, binding)

    async def binding(self, cluster: str, node: str) -> Binding | None:
        """The prefetched binding of the node's command (used once), else read now."""
        ahead = self._ahead.pop((cluster, node), None)
        if ahead is not None and self.clock() - ahead[0] < PREFETCH_S:
            return ahead[1]
        return (await read_bindings(self.redis, cluster, [node]))[node]

    async def sign(self, cmd: AgentCommand) -> AgentCommand:
        binding = await self.binding(cmd.cluster, cmd.node)
        return sign_command(cmd, await self.signer(), binding=binding)

    async def sign_bytes(self, cmd: AgentCommand) -> bytes:
        """The signed command's body, its canonical bytes written once (signed_command_bytes)."""
        binding = await self.binding(cmd.cluster, cmd.node)
        return signed_command_bytes(cmd, await self.signer(), binding=binding)
