"""PKI errors, classified by what the caller should do (see bke.core.errors).

    PermanentError
     └─ PkiError
         ├─ KeyAlgorithmError     an algorithm name outside KEY_ALGORITHMS
         ├─ CaIntegrityError      a CA (or sa) has its certificate but not its key, or the reverse:
         │                        never papered over by a new CA, which would break the cluster
         ├─ UnknownCertificate    `renew NAME` with a name that is not in the table / store
         ├─ CaRenewalRefused      `renew` of a CA: CA rotation is a separate, manual procedure
         └─ StoreError            a store's content is unusable (other cluster, bad manifest, ...)
    TemporaryError
     ├─ StoreConflict             someone else saved meanwhile: retry, the next run reuses it
     ├─ PkiNotReady               node files asked for before the PKI was ensured for that node
     └─ WorkerLost                an issuance worker process died (killed, out of memory): retry

No message ever contains key material: they name certificates and files only.
"""
from __future__ import annotations

from bke.core.errors import PermanentError, TemporaryError

__all__ = [
    "CaIntegrityError",
    "CaRenewalRefused",
    "KeyAlgorithmError",
    "PkiError",
    "PkiNotReady",
    "StoreConflict",
    "StoreError",
    "UnknownCertificate",
    "WorkerLost",
]


class PkiError(PermanentError):
    pass


class KeyAlgorithmError(PkiError):
    pass


class CaIntegrityError(PkiError):
    pass


class UnknownCertificate(PkiError):
    pass


class CaRenewalRefused(PkiError):
    pass


class PkiNotReady(TemporaryError):
    pass


class StoreError(PkiError):
    pass


class StoreConflict(TemporaryError):
    pass


class WorkerLost(TemporaryError):
    pass
