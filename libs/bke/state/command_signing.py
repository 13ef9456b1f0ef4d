"""Every command to an agent is signed: the dispatcher's (install phases, health rounds,
rotations) and the upgrader's.

The key is the deployment's one command-signing key (bke.secrets.signing), read from Redis on
first use and kept in memory: every replica signs with the same key, and a replica started
before the key existed makes it (`SET NX`: concurrent makers agree on one key). Loaded lazily so
that the service starts (and reports readiness) before the operator key is needed.
"""
from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

from redis.asyncio import Redis

from bke.contracts.agent import AgentCommand
from bke.secrets import SecretBox
from bke.secrets.signing import CommandSigner, ensure_command_key, sign_command, signed_command_bytes
from bke.state.keys import command_signing_key

__all__ = ["CommandSigning", "Sign", "SignBytes"]

Sign = Callable[[AgentCommand], Awaitable[AgentCommand]]  # what publishers of commands are given
# ... or, where the signed model is not needed, the body to publish (signing.signed_command_bytes)
SignBytes = Callable[[AgentCommand], Awaitable[bytes]]


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
        return sign_command(cmd, await self.signer())

    async def sign_bytes(self, cmd: AgentCommand) -> bytes:
        """The signed command's body, its canonical bytes written once (signed_command_bytes)."""
        return signed_command_bytes(cmd, await self.signer())
