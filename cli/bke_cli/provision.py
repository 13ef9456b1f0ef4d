"""Provisioning agents from the CLI (an operator identity): fetch the dispatcher's public
command key to give to the agents, checked against the key the operator pinned
(bke.core.secrets.command_key_pin), and record each agent's key through the provisioning channel
(`bke.v1.agents.provision`, bke.adapters.provisioning) as soon as its node prints it."""
from __future__ import annotations

import base64
import binascii
from datetime import datetime, timezone

from nats.aio.client import Client as NatsClient
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

from pathlib import Path

from bke.contracts.agent import AGENTS_COMMAND_KEY, CommandKey, GetCommandKey, ProvisionAgent
from bke.adapters.provisioning import ProvisionRefused, provision_agent
from bke.core.secrets.command_key_pin import CommandKeyPin, check_pinned, parse_pin, read_pin_file
from bke.core.secrets.sealing import SealedDataError, agent_key_id, public_key_from_raw
from bke.core.secrets.signing import CommandVerifyKey, parse_public_line

__all__ = ["NO_PIN", "KeyRecorder", "command_key_pin", "fetch_command_key", "trusted_command_key"]

NO_PIN = ("refusing to give the agents a command-signing key the bus answered, unverified: pin it with "
          "--command-key-fingerprint SHA256:... (`bke state init` prints it) or --command-key-file FILE "
          "(`bke state init --command-key-out FILE`, a lab's <lab>/command-key.pub), or pass "
          "--command-key-unsafe-skip-verification to trust the answer")


def command_key_pin(fingerprint: str | None, path: Path | None, unsafe: bool) -> CommandKeyPin | None:
    """The operator's pin from the options (None: --command-key-unsafe-skip-verification).
    ValueError for no option, two, or a file that cannot be read; SigningKeyError for a pin that
    is no key."""
    given = [o for o, v in (("--command-key-fingerprint", fingerprint), ("--command-key-file", path),
                            ("--command-key-unsafe-skip-verification", unsafe)) if v]
    if len(given) > 1:
        raise ValueError(f"give one of {', '.join(given)}, not both")
    if fingerprint:
        return parse_pin(fingerprint, "--command-key-fingerprint")
    if path is not None:
        try:
            return read_pin_file(path)
        except OSError as exc:
            raise ValueError(f"--command-key-file {path}: {exc.strerror}") from None
    if unsafe:
        return None
    raise ValueError(NO_PIN)


def trusted_command_key(answer_line: str, pin: CommandKeyPin | None) -> CommandVerifyKey:
    """The bus's answer if it is the pinned key (CommandKeyMismatch names both otherwise); with
    no pin, the answer as it is (the caller says it was not verified)."""
    return parse_public_line(answer_line) if pin is None else check_pinned(answer_line, pin)

PUBLIC_PREFIX = "bke-agent-x25519"


async def fetch_command_key(nc: NatsClient, timeout_s: float = 10.0) -> str:
    """The dispatcher's public line; RuntimeError if no dispatcher answers."""
    try:
        msg = await nc.request(AGENTS_COMMAND_KEY, GetCommandKey().to_bytes(), timeout=timeout_s)
    except (NoRespondersError, NatsTimeout):
        raise RuntimeError("no dispatcher answered for the command-signing key: start the services first") from None
    return CommandKey.model_validate_json(msg.data).public_line


class KeyRecorder:
    """`on_public_key` for bke.adapters.ssh.bootstrap_nodes: records each node's agent key."""

    def __init__(self, nc: NatsClient, cluster: str) -> None:
        self.nc, self.cluster = nc, cluster

    async def __call__(self, node: str, line: str) -> str:
        parts = line.split()
        if len(parts) != 2 or parts[0] != PUBLIC_PREFIX:
            return f"bke-agent init printed {line[:80]!r}, not '{PUBLIC_PREFIX} <base64>'"
        try:
            agent_id = agent_key_id(public_key_from_raw(base64.b64decode(parts[1], validate=True)))
        except (binascii.Error, ValueError, SealedDataError) as exc:
            return f"the agent's public key is unusable: {exc}"
        req = ProvisionAgent(cluster=self.cluster, node=node, agent_id=agent_id, seal_public_key_b64=parts[1],
                             at=datetime.now(timezone.utc).isoformat())
        try:
            await provision_agent(self.nc, req, timeout_s=30.0)
        except (ProvisionRefused, TimeoutError) as exc:
            return str(exc)
        return ""
