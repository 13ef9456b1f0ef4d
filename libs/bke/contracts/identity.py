"""An agent renews its own bus identity: a new JWT for the key it already holds.

Why a request of the agent's own: an agent's JWT expires (bke.adapters.auth.permissions
IDENTITY_TTL_S), and provisioning the node again would mint a new seed and ship it over SSH. Here
the agent asks, in the last third of its JWT's life, on its own node's subject (which nothing but
that node's identity may publish), and signs the request with the nkey of the identity it
renews. The owner of the NATS authority (the `renewer` identity, `bke identities serve-renewals`)
answers with a JWT for the same public key: no seed is made, sent or stored anywhere. A revoked
identity, a key that is not the node's recorded one or a request of another node is refused.
"""
from __future__ import annotations

from pydantic import Field

from .agent import node_token
from .base import Message
from .channel import Channel

__all__ = ["CHANNELS", "AGENT_IDENTITY_RENEW", "AgentIdentityRenewed", "RenewAgentIdentity", "renew_identity_subject"]

AGENT_IDENTITY_RENEW = "bke.v1.agents.{cluster}.{node}.renew-identity"
_PURPOSE = b"bke-renew-agent-identity\n"  # the signed bytes can be read as nothing else


def renew_identity_subject(cluster: str, node: str) -> str:
    """`bke.v1.agents.<cluster>.<node token>.renew-identity` (outside `bke.v1.agent.>`, which the
    agent stream stores: a request there would get the stream's PubAck as its answer)."""
    return f"bke.v1.agents.{cluster}.{node_token(node)}.renew-identity"


class RenewAgentIdentity(Message):
    """Request (one node's agent): a new JWT for `public_key`, the nkey it holds now. `jti` names
    the JWT it renews; `signature` is the nkey's ed25519 signature of `signed_bytes()`, base64."""

    cluster: str = Field(min_length=1, max_length=63)
    node: str = Field(min_length=1, max_length=253)
    public_key: str = Field(min_length=56, max_length=56, pattern=r"^U[A-Z2-7]{55}$")
    jti: str = Field(min_length=1, max_length=128)
    at: int = Field(ge=0)  # unix seconds when asked: a captured request is not answered much later
    signature: str = Field(min_length=1, max_length=128)

    def signed_bytes(self) -> bytes:
        return _PURPOSE + "\n".join((self.cluster, self.node, self.public_key, self.jti, str(self.at))).encode()


class AgentIdentityRenewed(Message):
    """Reply: `ok` with the new JWT (public: it names the key, never holds it) and its expiry,
    or the reason it was refused."""

    cluster: str
    node: str
    ok: bool
    jwt: str = ""
    expires_at: int | None = None
    reason: str = ""


CHANNELS: tuple[Channel, ...] = (
    Channel(AGENT_IDENTITY_RENEW, RenewAgentIdentity, "request", "A node's agent asks, in the last third of its JWT's life and signed with its own nkey, for a new JWT for the same key; the owner of the NATS authority answers (queue group renewer; core NATS, not stored). A revoked identity, another node's request or another key is refused.", ("agent",), ("renewer",), (AgentIdentityRenewed,)),
)
