"""The PKI operations over a store: ensure, renew, one node's bundle. The service layer.

Shared by the certs service (Redis store, see services/certs/bke_certs/service_core.py) and the
CLI (directory store), so that ``bke certs issue`` and the bus do the very same thing. Each
operation is load -> pure core (in a worker thread: it is CPU-bound) -> save.
"""
from __future__ import annotations

import asyncio
from collections.abc import Collection
from datetime import datetime, timedelta

from bke.core.plan import Plan
from bke.core.secrets import SecretBox
from .bundle import NodeFile, render_files
from .ensure import ensure_pki
from .errors import PkiNotReady, UnknownCertificate
from .kubeconfig import render_kubeconfig
from .expiry import ExpiryRow, expiration_rows, renewal_instances, select_renewals
from .instances import desired_instances, node_file_refs
from .issuance import IssueOptions, Validity, issue
from .manifest import build_manifest
from .material import cert_info
from .report import CertsReport, RenewedCert
from .store import PkiStore, Snapshot

__all__ = ["check_expiration", "cluster_kubeconfig", "ensure_cluster_pki", "node_bundle",
    "node_bundles", "renew_certs"]


async def ensure_cluster_pki(plan: Plan, store: PkiStore, now: datetime, box: SecretBox,
                             options: IssueOptions | None = None) -> CertsReport:
    """Idempotent: reuse what is valid, issue what is missing or stale, save, report."""
    snap = await store.load(plan.cluster, box)
    existing = snap.materials if snap else {}
    result = await asyncio.to_thread(ensure_pki, plan, existing, now, options, snap.manifest if snap else None)
    # Always save: adapters write only what differs (a deleted node file comes back, nothing else).
    await store.save(Snapshot(result.manifest, result.materials), result.changed, box,
                     snap.version if snap else None)
    return result.report


async def check_expiration(cluster: str, store: PkiStore, now: datetime) -> list[ExpiryRow]:
    """Certificates only: needs no secret key."""
    snap = await store.load(cluster, None)
    if snap is None:
        raise PkiNotReady(f"no PKI stored for cluster {cluster!r}")
    return expiration_rows(snap, now)


async def renew_certs(cluster: str, store: PkiStore, now: datetime, box: SecretBox, *,
                      names: Collection[str] | None = None, threshold: timedelta | None = None,
                      options: IssueOptions | None = None, kubernetes: str | None = None) -> list[RenewedCert]:
    """Renew the named leaves (``["all"]`` for every leaf) or, without names, those expiring
    within ``threshold``: new key and certificate, same subject and SANs, same CA. ``kubernetes``
    (an upgrade's target release): subjects that depend on the release follow it (renewal_instances)."""
    snap = await store.load(cluster, box)
    if snap is None:
        raise PkiNotReady(f"no PKI stored for cluster {cluster!r}")
    ids = select_renewals(snap, now, names=names, threshold=threshold)
    if not ids:
        return []
    m = snap.manifest
    instances = renewal_instances(snap, ids, kubernetes)
    cas = {e.ca: snap.materials[e.ca] for i in ids if (e := m.entries[i]).ca and e.ca in snap.materials}
    validity = Validity(now=now, ca_days=m.ca_validity_days, leaf_days=m.validity_days, algorithm=m.key_algorithm)
    issued = await asyncio.to_thread(issue, instances, cas, validity, options)
    await store.save(Snapshot(m, {**snap.materials, **issued}), set(issued), box, snap.version)
    out = []
    for iid in ids:
        info = cert_info(issued[iid].cert)
        e = m.entries[iid]
        out.append(RenewedCert(name=e.name, instance=iid, owner=e.owner, nodes=list(e.nodes),
                               serial=format(info.serial, "x"), not_after=info.not_after))
    return out


async def node_bundle(plan: Plan, store: PkiStore, hostname: str, box: SecretBox) -> list[NodeFile]:
    """One node's complete file set with contents (for the dispatcher, which seals it)."""
    return (await node_bundles(plan, store, [hostname], box))[hostname]


async def node_bundles(plan: Plan, store: PkiStore, hostnames: list[str], box: SecretBox) -> dict[str, list[NodeFile]]:
    """Several nodes' file sets from one pass over the plan and one load of the PKI: sealing
    for thousands of agents must not re-read the whole plan once per node."""
    files = node_file_refs(plan, hostnames)
    missing = [h for h in hostnames if h not in files]
    if missing:
        raise UnknownCertificate(f"node {missing[0]!r} is not in the plan of cluster {plan.cluster}")
    entries = build_manifest(plan, desired_instances(plan, hostnames), files).entries
    ids = {r.instance for h in hostnames for r in files[h]}
    ids |= {e.ca for i in list(ids) if (e := entries.get(i)) and e.ca}
    snap = await store.load(plan.cluster, box, ids)
    if snap is None:
        raise PkiNotReady(f"no PKI stored for cluster {plan.cluster!r}")
    return {h: render_files(files[h], snap.materials, entries, plan.cluster) for h in hostnames}

async def cluster_kubeconfig(cluster: str, store: PkiStore, name: str, box: SecretBox) -> bytes:
    """A cluster-wide kubeconfig instance (super-admin.conf, on no node) rendered from the store,
    for the caller to hold in memory or write 0600: the break-glass credential and the one the
    dispatcher applies bootstrap RBAC with. Loads only that instance and its CA."""
    snap = await store.load(cluster, None, ())  # the manifest only: not every node's certificate
    if snap is None:
        raise PkiNotReady(f"no PKI stored for cluster {cluster!r}")
    entry = snap.manifest.entries.get(name)
    if entry is None or entry.owner is not None or entry.server is None or not entry.user:
        raise UnknownCertificate(f"{name!r} is not a cluster-wide kubeconfig of cluster {cluster!r}")
    ids = [name] + ([entry.ca] if entry.ca else [])
    snap = await store.load(cluster, box, ids)
    m = snap.materials.get(name) if snap else None
    ca = snap.materials.get(entry.ca or "") if snap else None
    if m is None or m.key is None or ca is None:
        raise PkiNotReady(f"{name} of cluster {cluster!r} has not been issued (or its key is missing)")
    return render_kubeconfig(cluster=cluster, server=entry.server, ca_pem=ca.cert, cert_pem=m.cert,
                             key_pem=m.key, user=entry.user)
