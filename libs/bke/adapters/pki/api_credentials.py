"""The kubeconfigs BKE's own Kubernetes API work uses, kept apart from the PKI.

Why: the dispatcher (addons, labels and taints, health, drains of removals) and the upgrader
(drains, addons) need admin.conf, and super-admin.conf for the bootstrap RBAC step, but must not
read the PKI store, which holds the CA keys. The certs service, which owns the PKI, renders these
two from it whenever it ensures or renews the cluster's certificates and writes them, each
encrypted at rest, to `bke:<c>:api-credentials` (bke.adapters.state.keys), the one key those services read.

Encrypted with the `api` at-rest key, not the `pki` one (bke.core.secrets.key_kinds): the readers of
these kubeconfigs hold nothing that opens a CA key. Writing them reads the PKI (`pki_box`) and
encrypts with the `api` key (`api_box`); only the certs service holds both.
"""
from __future__ import annotations

from redis.asyncio import Redis

from bke.core.errors import TemporaryError
from bke.core.paths import ADMIN_CONF
from bke.core.plan import Plan
from bke.core.plan.api_node import init_node
from bke.core.secrets import SecretBox
from bke.adapters.state.keys.certs import api_credentials_key
from bke.core.pki.operations import cluster_kubeconfig, node_bundle
from bke.core.pki.store import PkiStore

__all__ = ["CREDENTIALS", "credential_aad", "read_api_credential", "write_api_credentials"]

CREDENTIALS = ("admin", "super-admin")


def credential_aad(cluster: str, name: str) -> bytes:
    """Bound to its cluster and name: a blob copied to another field or cluster does not open."""
    return f"api-credentials:{cluster}:{name}".encode()


async def write_api_credentials(redis: Redis, plan: Plan, store: PkiStore, pki_box: SecretBox,
                                api_box: SecretBox) -> None:
    """Render admin.conf (as the init master holds it) and super-admin.conf from the PKI and store
    them encrypted; idempotent (the same PKI writes the same kubeconfigs)."""
    files = await node_bundle(plan, store, init_node(plan).hostname, pki_box)
    admin = next((f.content for f in files if f.path == ADMIN_CONF), None)
    if admin is None:
        raise TemporaryError(f"no admin.conf in cluster {plan.cluster}'s PKI yet", delay=5.0)
    super_admin = await cluster_kubeconfig(plan.cluster, store, "super-admin.conf", pki_box)
    await redis.hset(api_credentials_key(plan.cluster), mapping={
        "admin": api_box.encrypt(admin, credential_aad(plan.cluster, "admin")),
        "super-admin": api_box.encrypt(super_admin, credential_aad(plan.cluster, "super-admin")),
    })


async def read_api_credential(redis: Redis, cluster: str, name: str, box: SecretBox) -> bytes:
    """One stored kubeconfig, decrypted; TemporaryError while certs has not written it."""
    if name not in CREDENTIALS:
        raise ValueError(f"unknown API credential {name!r} (one of {', '.join(CREDENTIALS)})")
    blob = await redis.hget(api_credentials_key(cluster), name)
    if blob is None:
        raise TemporaryError(f"no {name} kubeconfig for cluster {cluster} yet (the certs service writes it)", delay=5.0)
    return box.decrypt(blob if isinstance(blob, bytes) else blob.encode(), credential_aad(cluster, name))
