"""Signed commands for tests: one dispatcher key per test session, as a deployment has one."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bke.contracts.agent import AgentCommand, ProvisionAgent
from bke.core.secrets import SECRET_KEY_ENV, SecretBox, create_key_file, load_secret_box
from bke.core.secrets.signing import CommandSigner, ensure_command_key, sign_command
from bke.adapters.state.keys.certs import provisioned_agents_key
from bke.adapters.state.keys.trust import command_signing_key
from bke_agent import AgentIdentity
from bke_agent.verify import CommandVerifier

__all__ = ["OTHER_SIGNER", "SIGNER", "deployment_key", "operator_box", "operator_key_file", "provision", "signed", "verifier"]

SIGNER = CommandSigner.generate()
OTHER_SIGNER = CommandSigner.generate()  # a key that is not the deployment's (an attacker's)


def signed(cmd: AgentCommand, signer: CommandSigner = SIGNER) -> AgentCommand:
    return sign_command(cmd, signer)


def verifier(cluster: str, node: str, signer: CommandSigner = SIGNER) -> CommandVerifier:
    return CommandVerifier(signer.verify_key, cluster, node)


@pytest.fixture(scope="session")
def operator_key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One operator key for the session (the deployment's signing key in a shared Redis is
    encrypted with it, so every test must use the same one)."""
    path = tmp_path_factory.mktemp("operator") / "secret.key"
    create_key_file(path)
    return path


@pytest.fixture
def operator_box(operator_key_file: Path, monkeypatch: pytest.MonkeyPatch) -> SecretBox:
    """BKE_SECRET_KEY_FILE set for services started in this test; the key itself."""
    monkeypatch.setenv(SECRET_KEY_ENV, str(operator_key_file))
    return load_secret_box(operator_key_file)


async def deployment_key(redis: Any, box: SecretBox) -> CommandSigner:
    """The deployment's command-signing key, as the dispatcher and the lab supervisor ensure it."""
    return await ensure_command_key(redis, command_signing_key(), box)


async def provision(redis: Any, cluster: str, identities: dict[str, AgentIdentity]) -> None:
    """What the provisioning channel stores for these agents (tests of the dispatcher alone,
    where no certs service answers the request)."""
    for node, ident in identities.items():
        req = ProvisionAgent(cluster=cluster, node=node, agent_id=ident.agent_id, seal_public_key_b64=ident.public_key_b64)
        await redis.hset(provisioned_agents_key(cluster), node, req.model_dump_json(by_alias=True))
