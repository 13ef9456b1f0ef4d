"""Signed commands for tests: one dispatcher key per test session, as a deployment has one."""
from __future__ import annotations

from bke.contracts.agent import AgentCommand
from bke.secrets.signing import CommandSigner, sign_command
from bke_agent.verify import CommandVerifier

__all__ = ["SIGNER", "signed", "verifier"]

SIGNER = CommandSigner.generate()


def signed(cmd: AgentCommand, signer: CommandSigner = SIGNER) -> AgentCommand:
    return sign_command(cmd, signer)


def verifier(cluster: str, node: str, signer: CommandSigner = SIGNER) -> CommandVerifier:
    return CommandVerifier(signer.verify_key, cluster, node)
