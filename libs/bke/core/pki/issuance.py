"""Issuance engine: keys and certificates for a list of instances, CAs first, in parallel.

Why it looks like this: for a 5,000-node cluster the cost is key generation (RSA-2048: ~40 ms per
key) plus one signature per certificate, so the engine

(a) spreads big batches over ``procs`` processes (:mod:`bke.core.pki.workers`; from the CLI the
    calling process is one of them) in guided chunks, so that all finish together;
(b) has workers make key material ahead while the caller is still working out what to issue;
(c) keeps per-certificate work to the unavoidable: leaves are assembled as DER around bytes
    encoded once per CA and usage (:mod:`bke.core.pki.der`), then one signature and one key
    serialisation, from which the public key is read as well;
(d) parses each CA once per worker process.

Work travels to workers as compact tuples; CA PEMs ride along with each chunk (a few KB) and are
parsed once per process (``_SIGNERS``). Private keys cross only the parent/worker pipes of this
process tree; they are never logged.
"""
from __future__ import annotations

import gc
import hashlib
import multiprocessing
import multiprocessing.forkserver
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from ipaddress import ip_address

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, ExtensionOID, NameOID

from . import der
from .errors import CaIntegrityError
from .instances import Instance
from .keys import KEYGEN_SECONDS, PrivateKey, generate_key, load_private_key, signature_hash
from .material import Material
from .workers import WorkerPool

__all__ = ["BACKDATE", "IssueOptions", "Validity", "issue", "paused_gc", "start_fork_server", "worker_pool"]

# Leaves and CAs start slightly in the past so that a node whose clock lags a little accepts them.
BACKDATE = timedelta(minutes=5)
_POOL_MIN_SECONDS = 0.05  # below this estimated CPU time a pool costs more than it saves
_MIN_CHUNK_SECONDS = 0.005  # a chunk is this much work at least: each costs a pipe round trip


@dataclass(frozen=True)
class IssueOptions:
    """How to spend CPU: ``procs`` processes sign, this one included (``in_caller``).

    ``pool``: a running :class:`WorkerPool` to use (``ensure_pki`` starts one before its
    bookkeeping). Without it a pool is made per call when the work pays for it: forked if this
    process has a single thread (the CLI), else from a fork server, because forking a threaded
    process (an asyncio service calling us from a worker thread) can copy locks held by other
    threads. Like any non-fork start method, the fork server needs the program's main module to
    be import-safe (``if __name__ == "__main__"``).

    ``in_caller``: the calling thread signs too, beside ``procs - 1`` workers, as the floor of
    ``bench/certs.py`` has ``procs`` processes signing. From an asyncio service (the call runs in
    a worker thread) the event loop then shares the GIL with it for the duration, getting it back
    at least every switch interval (5 ms); ``False`` keeps the caller out and uses ``procs``
    workers (measured at 5,000 ECDSA nodes on 2 cores: 0.15 s instead of 0.13 s).
    """

    procs: int = os.cpu_count() or 1
    start_method: str | None = None  # None: "fork" if single-threaded, else "forkserver"
    pool: WorkerPool | None = None
    in_caller: bool = True

    def resolved(self) -> IssueOptions:
        """With the start method decided: "fork" if this process runs a single thread."""
        single = threading.active_count() == 1
        return replace(self, start_method=self.start_method or ("fork" if single else "forkserver"))


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
def worker_pool(options: IssueOptions, items: int, algorithm: str) -> Iterator[WorkerPool | None]:
    """The pool to issue ``items`` certificates with: the caller's, a new one if the estimated
    CPU time pays for it, or None (issue in this process).

    A new pool's workers make keys as soon as they start, until their first chunk arrives (keys
    depend on nothing but the algorithm), so callers enter this *before* working out what to
    issue. Each stops at its expected share: a worker with keys in hand is the faster one and
    takes at least its share of the chunks, so every key made ahead is used. A key made ahead
    never leaves its worker except as an issued key, and dies with the pool.
    """
    if options.pool is not None:
        yield options.pool
        return
    options = options.resolved()
    workers = options.procs - 1 if options.in_caller else options.procs
    if workers < 1 or items * KEYGEN_SECONDS.get(algorithm, 0.05) < _POOL_MIN_SECONDS:
        yield None
        return
    ctx = multiprocessing.get_context(options.start_method)
    if options.start_method == "forkserver":
        ctx.set_forkserver_preload([__name__])  # workers start with cryptography already imported
    ahead = items // options.procs
    with WorkerPool(workers, ctx, _issue_job, _make_keys_ahead, (algorithm, ahead)) as pool:
        yield pool


def start_fork_server() -> None:
    """Start the fork server a threaded caller's pools come from, now rather than at the first
    big issuance (it imports cryptography and the PKI code: about 2 s). For long-lived services;
    the program's main module must be import-safe, as for any fork server."""
    multiprocessing.get_context("forkserver").set_forkserver_preload([__name__])
    multiprocessing.forkserver.ensure_running()


def issue(instances: Sequence[Instance], cas: Mapping[str, Material], validity: Validity,
          options: IssueOptions | None = None) -> dict[str, Material]:
    """Issue every instance given (CA rows first), signing leaves with ``cas`` or new CAs.

    ``cas`` maps CA instance ids to existing CA material (with key). Returns id -> Material.
    Callers that start the pool themselves (:func:`worker_pool`) do their bookkeeping before
    calling this: the workers make keys meanwhile, and once issuing starts this process's time
    goes to signing and to keeping the workers supplied, not to anything else.
    """
    options = options or IssueOptions()
    first = [_item(i) for i in instances if i.spec.kind in ("ca", "keypair")]
    leaves = [i for i in instances if i.spec.kind not in ("ca", "keypair")]
    with worker_pool(options, len(instances), validity.algorithm) as pool:
        return _issue_in(pool, first, leaves, cas, validity, options)


def _issue_in(pool: WorkerPool | None, first: list[_Item], leaves: list[Instance], cas: Mapping[str, Material],
              validity: Validity, options: IssueOptions) -> dict[str, Material]:
    header = (validity.algorithm, validity.now, validity.ca_days, validity.leaf_days)
    min_chunk = max(1, round(_MIN_CHUNK_SECONDS / KEYGEN_SECONDS.get(validity.algorithm, 0.05)))
    # CAs first: leaves need them. A handful of keys: in the pool only when keys are slow (RSA).
    ca_pool = pool if validity.algorithm.startswith("RSA") and len(first) > 1 else None
    out = _run(ca_pool, (header, {}), first, options, min_chunk)
    if leaves:
        signers = {**cas, **out}
        needed = {i.spec.ca for i in leaves}
        missing = sorted(str(n) for n in needed if n not in signers or signers[n].key is None)
        if missing:
            raise CaIntegrityError(f"cannot sign: no CA certificate and key for {', '.join(missing)}")
        payload = {n: (signers[n].cert, signers[n].key) for n in needed}  # type: ignore[index]
        out.update(_run(pool, (header, payload), [_item(i) for i in leaves], options, min_chunk))
    return out


def _run(pool: WorkerPool | None, context: tuple, items: list[_Item], options: IssueOptions,
         min_chunk: int) -> dict[str, Material]:
    """Issue ``items`` in this process, or in chunks on the pool, this process taking chunks
    too when ``options.in_caller``.

    Guided self-scheduling: a worker's chunk is a 1/(4*procs) share of what is left, at least
    ``min_chunk``; big chunks first keep the per-chunk cost low, small ones last make everyone
    finish together (RSA key generation times also vary a lot). Each worker holds at most two
    chunks: one it works on and one waiting in its pipe, so it never waits for this process,
    which takes chunks of ``min_chunk`` at most and tops the workers up between them.
    """
    if not items:
        return {}
    if pool is None:
        return _materials(_issue_job((*context, items)))
    out: dict[str, Material] = {}
    pos, share = 0, 4 * options.procs

    def take(limit: int) -> list[_Item]:
        nonlocal pos
        size = min(limit, max(min_chunk, (len(items) - pos) // share))
        pos += size
        return items[pos - size:pos]

    try:
        while True:
            for worker in range(pool.size):
                while pool.busy[worker] < 2 and pos < len(items):
                    pool.send(worker, (*context, take(len(items))))
            for _, result in pool.replies(block=False):
                out.update(_materials(result))
            if options.in_caller and pos < len(items):
                out.update(_materials(_issue_job((*context, take(min_chunk)))))
            elif any(pool.busy):
                for _, result in pool.replies(block=True):
                    out.update(_materials(result))
            else:
                return out
    except BaseException:
        pool.drain()  # the other chunks' replies must not be read as the next call's
        raise


def _materials(result: list[tuple[str, bytes, bytes]]) -> dict[str, Material]:
    return {i: Material(c, k) for i, c, k in result}


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
    """A parsed CA, built once per process: certificate, key, AKI extension DER, hash, expiry,
    and its leaf signers per validity window (a run issues many chunks with the same one)."""

    __slots__ = ("cert", "key", "aki", "hash", "not_after", "_leaf_signers")

    def __init__(self, cert_pem: bytes, key_pem: bytes) -> None:
        self.cert = x509.load_pem_x509_certificate(cert_pem)
        self.key = load_private_key(key_pem)
        ski = self.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        self.aki = der.extension(ExtensionOID.AUTHORITY_KEY_IDENTIFIER.dotted_string, False,
                                 x509.AuthorityKeyIdentifier(ski.digest, None, None).public_bytes())
        self.hash = signature_hash(self.key)
        self.not_after = self.cert.not_valid_after_utc
        self._leaf_signers: dict[tuple[datetime, datetime, bool], der.LeafSigner] = {}

    def leaves(self, not_before: datetime, not_after: datetime, rsa_key: bool) -> der.LeafSigner:
        """A leaf signer for this CA; extensions per usage: keyUsage, extKeyUsage, AKI."""
        window = (not_before, not_after, rsa_key)
        signer = self._leaf_signers.get(window)
        if signer is None:
            if len(self._leaf_signers) >= _MAX_SIGNERS:
                self._leaf_signers.clear()
            exts = {usage: _key_usage_der(rsa_key) + der.extension(eku.oid.dotted_string, False, eku.public_bytes())
                    + self.aki for usage, eku in _EKU.items()}
            signer = self._leaf_signers[window] = der.LeafSigner(
                self.cert, self.key, self.hash, not_before, min(not_after, self.not_after), exts)
        return signer


_SIGNERS: dict[bytes, _Signer] = {}
# A fresh key with what every certificate needs of it: (key, PKCS#8 PEM, SubjectPublicKeyInfo DER).
_KeyMaterial = tuple[PrivateKey, bytes, bytes]
_AHEAD: dict[str, list[_KeyMaterial]] = {}  # algorithm -> key material made ahead (see worker_pool)
_PKCS8 = (serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _key_material(algorithm: str) -> _KeyMaterial:
    key = generate_key(algorithm)
    pkcs8 = key.private_bytes(*_PKCS8)
    pem = der.pem(pkcs8, "PRIVATE KEY")  # what private_key_pem() writes, byte for byte
    if algorithm.startswith("RSA"):
        return key, pem, key.public_key().public_bytes(*_SPKI)
    return key, pem, der.ec_spki_from_pkcs8(pkcs8)


# A forked child must never inherit keys made ahead: two processes would hand out the same key.
os.register_at_fork(after_in_child=_AHEAD.clear)


def _make_keys_ahead(algorithm: str, cap: int, until: Callable[[], bool]) -> None:
    """A worker's warm-up: make up to ``cap`` keys until ``until()`` (checked every ~1 ms)."""
    keys = _AHEAD.setdefault(algorithm, [])
    batch = max(1, int(0.001 / KEYGEN_SECONDS.get(algorithm, 0.05)))
    with paused_gc():
        while len(keys) < cap and not until():
            keys.extend(_key_material(algorithm) for _ in range(min(batch, cap - len(keys))))


def _new_key(algorithm: str) -> _KeyMaterial:
    ahead = _AHEAD.get(algorithm)
    return ahead.pop() if ahead else _key_material(algorithm)


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
    out = []
    for kind, iid, cn, o, dns, ips, usage, ca_id in items:
        key, key_pem, spki = _new_key(algorithm)
        if kind == "keypair":
            out.append((iid, der.pem(spki, "PUBLIC KEY"), key_pem))
        elif kind == "ca":
            out.append((iid, _ca_pem(key, cn, o, dns, ips, not_before, now + timedelta(days=ca_days), rsa_key), key_pem))
        else:
            cert = signers[ca_id].sign(x509.random_serial_number(), der.name(cn, o), spki,
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
