"""The certs service's keys: the PKI, the agents' sealing keys, the API credentials, renewals.

    bke:<c>:pki:<part>                   manifest, certs, keys, version          (certs)
    bke:pki-clusters                     set     clusters with a stored PKI      (certs)
    bke:<c>:certs:agents                 hash    agents' sealing keys as seen by certs
    bke:<c>:api-credentials              hash    admin.conf, super-admin.conf, encrypted (certs)
    bke:<c>:certs:ops / renewal:<rid>    hash / string  operations seen, answers (certs)
    bke:<c>:certs:lease:<slug>           string owner (PX)  one certs replica's periodic tick
    bke:<c>:agents:provisioned           hash    node -> the agent key BKE provisioned  (certs)
"""
from __future__ import annotations

from .common import PREFIX, cluster_key

__all__ = ["api_credentials_key", "certs_agents_key", "certs_lease_key", "certs_ops_key", "certs_renewal_key",
           "pki_index", "pki_key", "provisioned_agents_key"]


def pki_key(cluster: str, part: str) -> str:
    """`part`: manifest, certs, keys (encrypted at rest) or version."""
    return cluster_key(cluster, "pki", part)


def pki_index() -> str:
    """Clusters with a stored PKI, written with each save (the certs dashboard and metrics)."""
    return f"{PREFIX}:pki-clusters"


def certs_agents_key(cluster: str) -> str:
    return cluster_key(cluster, "certs", "agents")


def api_credentials_key(cluster: str) -> str:
    """The kubeconfigs BKE's own API work uses (admin.conf, super-admin.conf), each encrypted at
    rest: written by certs, read by the dispatcher and the upgrader, who never read the PKI
    (through bke.adapters.pki.api_credentials)."""
    return cluster_key(cluster, "api-credentials")


def certs_ops_key(cluster: str) -> str:
    """The certs service's view of the cluster's operations (install, rotation) from events."""
    return cluster_key(cluster, "certs", "ops")


def certs_lease_key(cluster: str, slug: str) -> str:
    """A lease of the certs service's replicas (their automatic renewal's tick)."""
    return cluster_key(cluster, "certs", "lease", slug)


def certs_renewal_key(cluster: str, request_id: str) -> str:
    """A renewal request's answer, kept for a redelivery of the same request."""
    return cluster_key(cluster, "certs", "renewal", request_id)


def provisioned_agents_key(cluster: str) -> str:
    """Hash node -> ProvisionAgent JSON: the agent key recorded at provisioning (certs; read
    through bke.adapters.state.agent_keys)."""
    return cluster_key(cluster, "agents", "provisioned")
