"""Every command to an agent is signed: the dispatcher's (install phases, health rounds,
rotations) and the upgrader's.

The key is the deployment's one command-signing key (bke.secrets.signing), read from Redis on
first use and kept in memory: every replica signs with the same key, and a replica started
before the key existed makes it (`SET NX`: concurrent makers agree on one key). Loaded lazily so
that the service starts (and reports readiness) before the operator key is needed.

Every command is bound to its receiver (bke.secrets.binding) from three records read in one
pipelined round trip per command, each written by its owner and only read here:

    bke:<c>:plan-meta          `incarnation` (planner, with the cluster's first plan)
    bke:<c>:agents:provisioned the node's provisioned key id (certs, at `bke agent provision`)
    bke:<c>:heartbeat:runtime  whether the node's agent reads bound commands (dispatcher, from
                               its heartbeats)

Why read for every command rather than cached: a node provisioned again must be sent commands
for its new key at once (an agent refuses one for its old key, and a refused command is not
sent again), and the read costs one round trip beside the signature (bench/command_binding.py).
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from pydantic import ValidationError
from redis.asyncio import Redis

from bke.contracts.agent import AgentCommand, AgentRuntime, ProvisionAgent
from bke.secrets import SecretBox
from bke.secrets.binding import Binding, binding_for
from bke.secrets.signing import CommandSigner, ensure_command_key, sign_command, signed_command_bytes
from bke.state.keys import command_signing_key, heartbeat_runtime_key, plan_meta_key, provisioned_agents_key
from bke.state.plans import INCARNATION_FIELD

__all__ = ["CommandSigning", "Sign", "SignBytes", "read_binding"]

Sign = Callable[[AgentCommand], Awaitable[AgentCommand]]  # what publishers of commands are given
# ... or, where the signed model is not needed, the body to publish (signing.signed_command_bytes)
SignBytes = Callable[[AgentCommand], Awaitable[bytes]]


def _text(raw: object) -> str | None:
    return None if raw is None else raw.decode() if isinstance(raw, bytes) else str(raw)


async def read_binding(redis: Redis, cluster: str, node: str) -> Binding | None:
    """The binding of a command for `node` of `cluster` (None: sent unbound; see the module
    docstring). A provisioned record or runtime that does not parse counts as absent."""
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hget(plan_meta_key(cluster), INCARNATION_FIELD)
        pipe.hget(provisioned_agents_key(cluster), node)
        pipe.hget(heartbeat_runtime_key(cluster), node)
        incarnation, provisioned, runtime = await pipe.execute()
    try:
        agent_id = ProvisionAgent.model_validate_json(provisioned).agent_id if provisioned is not None else None
    except ValidationError:
        agent_id = None
    try:
        binds = AgentRuntime.model_validate_json(runtime).command_binding if runtime is not None else None
    except ValidationError:
        binds = None
    return binding_for(agent_id, _text(incarnation), binds)


class CommandSigning:
    def __init__(self, redis: Redis, box_factory: Callable[[], SecretBox]) -> None:
        self.redis, self.box_factory = redis, box_factory
        self._signer: CommandSigner | None = None
        self._lock = asyncio.Lock()

    async def signer(self) -> CommandSigner:
        if self._signer is None:
            async with self._lock:
                if self._signer is None:
                    self._signer = await ensure_command_key(self.redis, command_signing_key(), self.box_factory())
        return self._signer

    async def sign(self, cmd: AgentCommand) -> AgentCommand:
        binding = await read_binding(self.redis, cmd.cluster, cmd.node)
        return sign_command(cmd, await self.signer(), binding=binding)

    async def sign_bytes(self, cmd: AgentCommand) -> bytes:
        """The signed command's body, its canonical bytes written once (signed_command_bytes)."""
        binding = await read_binding(self.redis, cmd.cluster, cmd.node)
        return signed_command_bytes(cmd, await self.signer(), binding=binding)
