"""Least-privilege PKI for split-etcd clusters: the certificate table, issuance, ensure, and the
store protocol (the stores, a directory and Redis, are bke.adapters.pki).

Layers (imports go downwards only)::

    operations      async: load -> core -> save over a PkiStore (service layer)
    store
    ensure, expiry  pure cores (decide; expiry and renewal selection)
    issue           the CPU engine (keys + signatures, process pool)
    bundle, kubeconfig, manifest, report
    instances       plan x table -> instances and per-node file sets
    table, keys, material, errors

See docs/certs.md (generated in part from :data:`CERTS` by :mod:`.docs`).
"""
from .bundle import NodeFile, render_files
from .ensure import EnsureResult, Verdict, decide, ensure_pki, renew_before
from .errors import (
    CaIntegrityError,
    CaRenewalRefused,
    KeyAlgorithmError,
    PkiError,
    PkiNotReady,
    StoreConflict,
    StoreError,
    UnknownCertificate,
    WorkerLost,
)
from .expiry import ExpiryRow, expiration_rows, select_renewals
from .instances import FileRef, Instance, desired_instances, node_file_refs
from .issuance import IssueOptions, Validity, issue
from .keys import generate_key, key_algorithm_of
from .manifest import Manifest
from .material import CertInfo, Material, cert_info
from .operations import check_expiration, ensure_cluster_pki, node_bundle, renew_certs
from .report import CertsReport, Reissued, RenewedCert
from .store import PkiStore, Snapshot
from .table import CERTS, CertSpec, Place, by_name

__all__ = [
    "CERTS",
    "CaIntegrityError",
    "CaRenewalRefused",
    "CertInfo",
    "CertSpec",
    "CertsReport",
    "EnsureResult",
    "ExpiryRow",
    "FileRef",
    "Instance",
    "IssueOptions",
    "KeyAlgorithmError",
    "Manifest",
    "Material",
    "NodeFile",
    "PkiError",
    "PkiNotReady",
    "PkiStore",
    "Place",
    "Reissued",
    "RenewedCert",
    "Snapshot",
    "StoreConflict",
    "StoreError",
    "UnknownCertificate",
    "WorkerLost",
    "Validity",
    "Verdict",
    "by_name",
    "cert_info",
    "check_expiration",
    "decide",
    "desired_instances",
    "ensure_cluster_pki",
    "ensure_pki",
    "expiration_rows",
    "generate_key",
    "issue",
    "key_algorithm_of",
    "node_bundle",
    "node_file_refs",
    "render_files",
    "renew_before",
    "renew_certs",
    "select_renewals",
]
