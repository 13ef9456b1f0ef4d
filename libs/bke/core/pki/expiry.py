"""Expiry report and renewal selection, from a stored snapshot alone (no plan needed). Pure.

Like ``kubeadm certs check-expiration`` / ``renew``: the stored certificates are the source of
truth for CN, O and SANs when renewing; CAs are listed but never renewed here (CA rotation is a
separate, manual procedure), and the ``sa`` key pair has no expiry.
"""
from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from .errors import CaRenewalRefused, UnknownCertificate
from .instances import Instance
from .material import CertInfo, cert_info
from .store import Snapshot
from .table import by_name

__all__ = ["ExpiryRow", "expiration_rows", "renewal_instances", "select_renewals"]


@dataclass(frozen=True, slots=True)
class ExpiryRow:
    instance: str
    name: str
    owner: str | None
    is_ca: bool
    not_after: datetime
    residual: timedelta
    ca: str | None
    nodes: tuple[str, ...]


def expiration_rows(snapshot: Snapshot, now: datetime) -> list[ExpiryRow]:
    """One row per stored certificate, CAs first (manifest order)."""
    rows = []
    for iid, entry in snapshot.manifest.entries.items():
        spec = by_name(entry.name)
        m = snapshot.materials.get(iid)
        if spec is None or spec.kind == "keypair" or m is None:
            continue
        info = cert_info(m.cert)
        rows.append(ExpiryRow(iid, entry.name, entry.owner, spec.is_ca, info.not_after, info.not_after - now,
                              entry.ca, entry.nodes))
    return rows


def select_renewals(snapshot: Snapshot, now: datetime, *, names: Collection[str] | None = None,
                    threshold: timedelta | None = None) -> list[str]:
    """Leaf instance ids to renew: ``names`` (row names or instance ids; "all" = every leaf),
    else those expiring within ``threshold``. Raises for CAs and unknown names."""
    entries = snapshot.manifest.entries
    leaves = [i for i, e in entries.items() if (s := by_name(e.name)) is not None and s.kind in ("leaf", "kubeconfig")]
    if names is None:
        limit = now + (threshold or timedelta(0))
        return [i for i in leaves if i in snapshot.materials and cert_info(snapshot.materials[i].cert).not_after <= limit]
    picked: dict[str, None] = {}
    for name in names:
        if name == "all":
            picked.update(dict.fromkeys(leaves))
            continue
        matches = [i for i in leaves if i == name or entries[i].name == name]
        if not matches:
            spec = by_name(entries[name].name) if name in entries else by_name(name)
            if spec is not None and spec.kind in ("ca", "keypair"):
                raise CaRenewalRefused(f"{name} is a CA or key pair; CA rotation is not done by renew")
            raise UnknownCertificate(f"no certificate {name!r} in the store of cluster {snapshot.manifest.cluster}")
        picked.update(dict.fromkeys(matches))
    return list(picked)


def renewal_instances(snapshot: Snapshot, ids: Collection[str], kubernetes: str | None = None) -> list[Instance]:
    """Instances that reproduce the stored certificates' subject and SANs (kubeadm's renew).

    ``kubernetes``: the release an upgrade moves to. A row whose subject depends on the release
    (bke.core.pki.subjects) then gets that release's organisations, as `kubeadm upgrade apply` re-issues
    apiserver-kubelet-client without kubeadm:cluster-admins when it reaches 1.35.5, 1.36.1 or 1.37
    (kubernetes/kubeadm#3310); every other row, and every row without it, keeps what is stored."""
    out = []
    for iid in ids:
        entry = snapshot.manifest.entries[iid]
        spec = by_name(entry.name)
        if spec is None:
            raise UnknownCertificate(f"{iid}: row {entry.name!r} is not in the certificate table")
        info: CertInfo = cert_info(snapshot.materials[iid].cert)
        o = spec.o_for(kubernetes) if spec.o_rule and kubernetes is not None else info.o
        out.append(Instance(iid, spec, entry.owner, info.cn, o, info.dns, info.ips, entry.server))
    return out
