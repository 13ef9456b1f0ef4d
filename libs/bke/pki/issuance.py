"""Issuance engine: keys and certificates for a list of instances, CAs first, in parallel.

Why it looks like this: for a 5,000-node cluster the cost is key generation (RSA-2048: ~40 ms per
key) plus one signature per certificate, so the engine (a) runs big batches in a process pool,
(b) keeps per-certificate work to the unavoidable: leaves are assembled as DER around bytes
encoded once per CA and usage (:mod:`bke.pki.der`), then one signature and one key serialisation,
and (c) parses each CA once per worker process.

Work travels to workers as compact tuples; CA PEMs ride along with each chunk (a few KB) and are
parsed once per process (``_SIGNERS``). Private keys cross only the parent/worker pipes of this
process tree; they are never logged.
"""
from __future__ import annotations

import gc
import hashlib
import multiprocessing
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from ipaddress import ip_address
from typing import TypeVar

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from . import der
from .errors import CaIntegrityError
from .instances import Instance
from .keys import KEYGEN_SECONDS, PrivateKey, generate_key, load_private_key, private_key_pem, signature_hash
from .material import Material

__all__ = ["BACKDATE", "IssueOptions", "Validity", "issue", "paused_gc", "worker_pool"]

# Leaves and CAs start slightly in the past so that a node whose clock lags a little accepts them.
BACKDATE = timedelta(minutes=5)
_POOL_MIN_SECONDS = 0.05  # below this estimated CPU time a pool costs more than it saves
T = TypeVar("T")


@dataclass(frozen=True)
class IssueOptions:
    """How to spend CPU.

    ``executor`` lets a long-lived service reuse one process pool. Without it a pool is made per
    call when the work pays for it: forked if this process has a single thread (the CLI), else
    from a fork server, because forking a threaded process (an asyncio service calling us from
    a worker thread) can copy locks held by other threads. Like any non-fork start method, the
    fork server needs the program's main module to be import-safe (``if __name__ == "__main__"``).
    """

    procs: int = os.cpu_count() or 1
    start_method: str | None = None  # None: "fork" if single-threaded, else "forkserver"
    executor: Executor | None = None


@dataclass(frozen=True)
class Validity:
    now: datetime
    ca_days: int
    leaf_days: int
    algorithm: str


# item: (kind, id, cn, o, dns, ips, usage, ca_id)
_Item = tuple[str, str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...], str, str | None]


def _item(inst: Instance) -> _Item:
    return (inst.spec.kind, inst.id, inst.cn, inst.o, inst.dns, inst.ips, inst.spec.usage, inst.spec.ca)


@contextmanager
def worker_pool(options: IssueOptions, items: int, algorithm: str) -> Iterator[Executor | None]:
    """The executor to issue ``items`` certificates with: the caller's, a new process pool if the
    estimated CPU time pays for one, or None (issue in this process).

    A new pool forks its workers at once, so callers enter this *before* building their
    instance lists: the fork overlaps that work and copies a smaller heap.
    """
    if options.executor is not None:
        yield options.executor
        return
    if options.procs <= 1 or items * KEYGEN_SECONDS.get(algorithm, 0.05) < _POOL_MIN_SECONDS:
        yield None
        return
    method = options.start_method or ("fork" if threading.active_count() == 1 else "forkserver")
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload([__name__])  # workers start with cryptography already imported
    with ProcessPoolExecutor(options.procs, mp_context=ctx) as pool:
        pool.submit(int)  # starts every worker now (all at once for "fork")
        yield pool


def issue(instances: Sequence[Instance], cas: Mapping[str, Material], validity: Validity,
          options: IssueOptions | None = None,
          meanwhile: Callable[[], T] | None = None) -> tuple[dict[str, Material], T | None]:
    """Issue every instance given (CA rows first), signing leaves with ``cas`` or new CAs.

    ``cas`` maps CA instance ids to existing CA material (with key). ``meanwhile`` runs in this
    process while the pool works on the leaves (the ensure step builds its manifest there), so
    that bookkeeping overlaps with key generation instead of adding to it.
    Returns (id -> Material, meanwhile's result).
    """
    options = options or IssueOptions()
    first = [_item(i) for i in instances if i.spec.kind in ("ca", "keypair")]
    leaves = [i for i in instances if i.spec.kind not in ("ca", "keypair")]
    with worker_pool(options, len(instances), validity.algorithm) as pool:
        return _issue_in(pool, first, leaves, cas, validity, options.procs, meanwhile)


def _issue_in(pool: Executor | None, first: list[_Item], leaves: list[Instance], cas: Mapping[str, Material],
              validity: Validity, procs: int, meanwhile: Callable[[], T] | None) -> tuple[dict[str, Material], T | None]:
    header = (validity.algorithm, validity.now, validity.ca_days, validity.leaf_days)
    # CAs first: leaves need them. A handful of keys: in the pool only when keys are slow (RSA).
    ca_pool = pool if validity.algorithm.startswith("RSA") and len(first) > 1 else None
    out = _collect(_submit(ca_pool, header, {}, first, procs))
    pending: list = []
    if leaves:
        signers = {**cas, **out}
        needed = {i.spec.ca for i in leaves}
        missing = sorted(str(n) for n in needed if n not in signers or signers[n].key is None)  # type: ignore[index]
        if missing:
            raise CaIntegrityError(f"cannot sign: no CA certificate and key for {', '.join(missing)}")
        payload = {n: (signers[n].cert, signers[n].key) for n in needed}  # type: ignore[index]
        pending = _submit(pool, header, payload, [_item(i) for i in leaves], procs)
    extra = meanwhile() if meanwhile is not None else None
    out.update(_collect(pending))
    return out, extra


def _submit(pool: Executor | None, header: tuple, payload: dict, items: list[_Item], procs: int) -> list:
    """Start the work: futures from the pool, or the finished result when there is no pool."""
    if not items:
        return []
    if pool is None:
        return [_issue_job((header, payload, items))]
    # Several chunks per worker: the first arrives sooner (less to pickle), and RSA keygen times
    # vary a lot, so small chunks balance the load.
    n_chunks = max(1, min(len(items), procs * 4))
    size = -(-len(items) // n_chunks)
    return [pool.submit(_issue_job, (header, payload, items[k:k + size])) for k in range(0, len(items), size)]


def _collect(pending: list) -> dict[str, Material]:
    out: dict[str, Material] = {}
    for part in pending:
        result = part if isinstance(part, list) else part.result()
        out.update((i, Material(c, k)) for i, c, k in result)
    return out


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic GC around allocation-heavy code that builds no reference cycles.

    Why: issuing for 5,000 nodes allocates millions of short-lived objects; every generation-0
    overflow would trigger collections that walk the whole heap (a 5,000-node plan), which costs
    more than the signatures themselves - and, in a forked worker, copies shared pages.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ---- worker side (also used in-process) ----------------------------------------------------------

class _Signer:
    """A parsed CA, built once per process: certificate, key, AKI extension DER, hash, expiry."""

    __slots__ = ("cert", "key", "aki", "hash", "not_after")

    def __init__(self, cert_pem: bytes, key_pem: bytes) -> None:
        self.cert = x509.load_pem_x509_certificate(cert_pem)
        self.key = load_private_key(key_pem)
        ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        self.aki = der.extension(ExtensionOID.AUTHORITY_KEY_IDENTIFIER.dotted_string, False,
                                 x509.AuthorityKeyIdentifier(ski.digest, None, None).public_bytes())
        self.hash = signature_hash(self.key)
        self.not_after = self.cert.not_valid_after_utc

    def leaves(self, not_before: datetime, not_after: datetime, rsa_key: bool) -> der.LeafSigner:
        """A leaf signer for this CA; extensions per usage: keyUsage, extKeyUsage, AKI."""
        exts = {usage: _key_usage_der(rsa_key) + der.extension(eku.oid.dotted_string, False, eku.public_bytes())
                + self.aki for usage, eku in _EKU.items()}
        return der.LeafSigner(self.cert, self.key, self.hash, not_before, min(not_after, self.not_after), exts)


_SIGNERS: dict[bytes, _Signer] = {}
_EKU = {
    "server": x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
    "client": x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
    "server+client": x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
}


_MAX_SIGNERS = 32  # a long-lived service sees many clusters: keep few parsed CA keys around


def _signer(cert_pem: bytes, key_pem: bytes) -> _Signer:
    digest = hashlib.sha256(cert_pem + key_pem).digest()
    signer = _SIGNERS.get(digest)
    if signer is None:
        if len(_SIGNERS) >= _MAX_SIGNERS:
            _SIGNERS.clear()
        signer = _SIGNERS[digest] = _Signer(cert_pem, key_pem)
    return signer


def _name(cn: str, o: Iterable[str]) -> x509.Name:
    # Go's pkix order (what kubeadm emits): O before CN. Same bytes as der.name().
    return x509.Name([*(x509.NameAttribute(NameOID.ORGANIZATION_NAME, v) for v in o),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_usage(ca: bool, rsa_key: bool) -> x509.KeyUsage:
    # keyEncipherment only means something for RSA keys (kubeadm sets it for every key: a known wart).
    return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=rsa_key,
                         data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=False,
                         encipher_only=False, decipher_only=False)


def _key_usage_der(rsa_key: bool) -> bytes:
    ku = _key_usage(False, rsa_key)
    return der.extension(ku.oid.dotted_string, True, ku.public_bytes())


def _san(dns: tuple[str, ...], ips: tuple[str, ...]) -> x509.Extension:
    san = x509.SubjectAlternativeName([*(x509.DNSName(d) for d in dns), *(x509.IPAddress(ip_address(i)) for i in ips)])
    return x509.Extension(san.oid, False, san)


def _issue_job(job: tuple) -> list[tuple[str, bytes, bytes]]:
    """Issue one chunk. Top-level so that a process pool can pickle it by reference.

    The cyclic GC is paused (see :func:`paused_gc`).
    """
    with paused_gc():
        return _issue_items(job)


def _issue_items(job: tuple) -> list[tuple[str, bytes, bytes]]:
    (algorithm, now, ca_days, leaf_days), ca_payload, items = job
    not_before = now - BACKDATE
    rsa_key = algorithm.startswith("RSA")  # keyEncipherment only for RSA keys
    leaf_end = now + timedelta(days=leaf_days)
    signers = {ca_id: _signer(*pems).leaves(not_before, leaf_end, rsa_key) for ca_id, pems in ca_payload.items()}
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    out = []
    for kind, iid, cn, o, dns, ips, usage, ca_id in items:
        key = generate_key(algorithm)
        key_pem = private_key_pem(key)
        if kind == "keypair":
            pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
            out.append((iid, pub, key_pem))
        elif kind == "ca":
            out.append((iid, _ca_pem(key, cn, o, dns, ips, not_before, now + timedelta(days=ca_days), rsa_key), key_pem))
        else:
            cert = signers[ca_id].sign(x509.random_serial_number(), der.name(cn, o), key.public_key().public_bytes(*spki),
                                       usage, der.san(dns, ips) if dns or ips else b"")
            out.append((iid, der.pem(cert), key_pem))
    return out


def _ca_pem(key: PrivateKey, cn: str, o: tuple[str, ...], dns: tuple[str, ...], ips: tuple[str, ...],
            not_before: datetime, not_after: datetime, rsa_key: bool) -> bytes:
    """A self-signed CA (a handful per cluster: the builder's cost does not matter here)."""
    name, public = _name(cn, o), key.public_key()
    ku = _key_usage(True, rsa_key)
    bc = x509.BasicConstraints(ca=True, path_length=None)
    ski = x509.SubjectKeyIdentifier.from_public_key(public)
    exts = [x509.Extension(ku.oid, True, ku), x509.Extension(bc.oid, True, bc), x509.Extension(ski.oid, False, ski)]
    if dns or ips:
        exts.append(_san(dns, ips))
    cert = x509.CertificateBuilder(
        issuer_name=name, subject_name=name, public_key=public, serial_number=x509.random_serial_number(),
        not_valid_before=not_before, not_valid_after=not_after, extensions=exts).sign(key, signature_hash(key))
    return cert.public_bytes(serialization.Encoding.PEM)
