"""Never seal a bundle of one CA to a node that holds another (state is never silently lost).

If BKE's state was lost and the cluster started over, the store's CA is new while the nodes keep
the old one. An agent reports the CA it holds (`AgentRegistered.ca_fingerprint`, read from its
`etc/kubernetes/pki/ca.crt`). A bundle whose cluster CA differs is refused with a `certs.failed`
that says why and what to do, and the install fails with that reason instead of replacing a
running cluster's trust root.

A node that holds no CA yet (None) is a new node, and anything may be sealed to it. The pure core
is `ca_conflict`; the certs handler calls it once per agent before sealing.
"""
from __future__ import annotations

from bke.contracts.agent import AgentRegistered
from bke.core.pki import NodeFile as PkiFile
from bke.core.secrets.fingerprint import CA_CERT_PATH, cert_fingerprint

__all__ = ["ca_conflict"]


def ca_conflict(files: list[PkiFile], agent: AgentRegistered) -> str | None:
    """Why this bundle must not be sealed to `agent`, or None if it may be."""
    if not agent.ca_fingerprint:
        return None
    ca = next((f for f in files if f.path.lstrip("/") == CA_CERT_PATH), None)
    if ca is None:
        return None  # this node gets no cluster CA (nothing to contradict)
    stored = cert_fingerprint(ca.content)
    if stored == agent.ca_fingerprint:
        return None
    return (f"node {agent.node} holds CA {agent.ca_fingerprint}, the store has {stored}: "
            "the state was lost or replaced; restore a backup (`bke state restore`)")
