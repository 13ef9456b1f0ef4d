"""What the certs service's handlers call: ensure on `plan created`, renew on the bus, bundles.

Thin on purpose: the operations live in bke.core.pki.operations (shared with the CLI); this module adds
the service's structured logs (cluster and operation on every line, counts only - never key
material) and fixes the signatures the handlers and the dispatcher use.

Errors the handlers map (see bke.core.errors): PkiError / SecretKeyError -> rejected (permanent);
StoreConflict / PkiNotReady -> retry later (temporary); anything else -> redelivery with backoff.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta

from bke.core.pki import CertsReport, IssueOptions, NodeFile, PkiStore, RenewedCert
from bke.core.pki.operations import ensure_cluster_pki, node_bundle as _node_bundle, renew_certs
from bke.core.plan import Plan
from bke.core.secrets import SecretBox

__all__ = ["ensure_cluster_certs", "node_bundle", "renew_requested"]

log = logging.getLogger(__name__)


async def ensure_cluster_certs(plan: Plan, store: PkiStore, now: datetime, box: SecretBox, *,
                               options: IssueOptions | None = None) -> CertsReport:
    """Idempotent ensure of the cluster's PKI (CA keys stored encrypted); a report of references."""
    extra = {"cluster": plan.cluster, "operation": "ensure_certs"}
    report = await ensure_cluster_pki(plan, store, now, box, options)
    log.info("PKI ensured: %d issued, %d reissued, %d reused, %d removed, %d nodes to deliver",
             len(report.issued), len(report.reissued), len(report.reused), len(report.removed),
             len(report.changed_nodes), extra=extra)
    for r in report.reissued:
        log.info("reissued %s: %s", r.instance, r.reason, extra=extra)
    for w in report.warnings:
        log.warning(w, extra=extra)
    return report


async def renew_requested(cluster: str, store: PkiStore, now: datetime, box: SecretBox, *,
                          names: list[str] | None, threshold: timedelta | None, request_id: str,
                          options: IssueOptions | None = None, kubernetes: str | None = None) -> list[RenewedCert]:
    """Renew the named leaves (or every leaf expiring within ``threshold`` of ``now``): new key
    and serial, same subject and SANs, same CA. One RenewedCert each; the handler publishes them
    all in one event, so the dispatcher starts one rotation. ``kubernetes``: an upgrade's target
    release, whose subjects the renewed certificates take where kubeadm changed them."""
    renewed = await renew_certs(cluster, store, now, box, names=names or None, threshold=threshold, options=options,
                                kubernetes=kubernetes)
    log.info("renewed %d certificate(s): %s", len(renewed), ", ".join(r.instance for r in renewed[:20]),
             extra={"cluster": cluster, "operation": "renew_certs", "request_id": request_id})
    return renewed


async def node_bundle(plan: Plan, store: PkiStore, hostname: str, box: SecretBox) -> list[NodeFile]:
    """One node's complete file set with contents; secret files must be sealed to its agent."""
    files = await _node_bundle(plan, store, hostname, box)
    log.debug("bundle of %d files", len(files), extra={"cluster": plan.cluster, "node": hostname,
                                                       "operation": "node_bundle"})
    return files
