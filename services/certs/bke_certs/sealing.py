"""Hand-off of one node's files to the dispatcher: secret files sealed to that node's agent.

Only the certs service ever holds key material in clear (in memory); what it stores for the
dispatcher (`bke:<cluster>:files:certs`) is public certificates plus ciphertext that only the
receiving agent's X25519 key opens.
"""
from __future__ import annotations

import base64
import binascii
import hashlib

from bke.contracts.agent import AgentRegistered, ProvisionAgent
from bke.core.pki import NodeFile as PkiFile
from bke.core.secrets.sealing import SealedDataError, agent_key_id, public_key_from_raw, seal
from bke.core.state.nodefiles import NodeFile

__all__ = ["provisioned_refusal", "seal_bundle"]


def provisioned_refusal(provisioned: ProvisionAgent | None, reg: AgentRegistered | None) -> str:
    """Why a registration is not sealed to ("" when it may be), or, with `reg` None, why a
    provisioning request is unusable. Trust is provisioned, never announced: only the key BKE
    recorded for the node at provisioning is ever sealed to."""
    if provisioned is None:
        return f"no agent key was provisioned for node {reg.node if reg else '?'}"
    try:
        raw = base64.b64decode(provisioned.seal_public_key_b64, validate=True)
        key_id = agent_key_id(public_key_from_raw(raw))
    except (binascii.Error, ValueError, SealedDataError) as exc:
        return f"sealPublicKeyB64: not a base64 X25519 public key ({exc})"
    if key_id != provisioned.agent_id:
        return "agentId: is not the id of sealPublicKeyB64"
    if reg is not None and (reg.agent_id, reg.seal_public_key_b64) != (provisioned.agent_id, provisioned.seal_public_key_b64):
        return f"the agent's key ({reg.agent_id}) is not the one provisioned for node {reg.node} ({provisioned.agent_id})"
    return ""


def seal_bundle(files: list[PkiFile], agent: AgentRegistered) -> list[NodeFile]:
    public = public_key_from_raw(base64.b64decode(agent.seal_public_key_b64))
    if agent_key_id(public) != agent.agent_id:
        # the id is what the agent reports on every result: refuse a key it does not own
        raise ValueError(f"agent {agent.node}: announced id does not match its key")
    out = []
    for f in files:
        digest = hashlib.sha256(f.content).hexdigest()
        if f.secret:
            out.append(NodeFile(path=f.path, mode=f.mode, sha256=digest, sealed_b64=base64.b64encode(seal(public, f.content)).decode()))
        else:
            out.append(NodeFile(path=f.path, mode=f.mode, sha256=digest, content_b64=base64.b64encode(f.content).decode()))
    return out
