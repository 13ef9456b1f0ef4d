"""Issuance engine: keys and certificates for a list of instances, CAs first, in parallel.

Why it looks like this: for a 5,000-node cluster the cost is key generation (RSA-2048: ~40 ms per
key) plus one signature per certificate, so the engine (a) runs big batches in a process pool,
(b) keeps per-certificate work to the unavoidable (one builder call with precomputed extensions,
one key and one certificate serialisation), and (c) parses each CA once per worker process.

Work travels to workers as compact tuples; CA PEMs ride along with each chunk (a few KB) and are
parsed once per process (``_SIGNERS``). Private keys cross only the parent/worker pipes of this
process tree; they are never logged.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from ipaddress import ip_address

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .instances import Instance
from .keys import KEYGEN_SECONDS, generate_key, load_private_key, private_key_pem, signature_hash
from .material import Material

__all__ = ["BACKDATE", "IssueOptions", "Validity", "issue"]

# Leaves and CAs start slightly in the past so that a node whose clock lags a little accepts them.
BACKDATE = timedelta(minutes=5)
_POOL_MIN_SECONDS = 0.25  # below this estimated CPU time a pool costs more than it saves


@dataclass(frozen=True)
class IssueOptions:
    """How to spend CPU. ``executor`` lets a long-lived service reuse one process pool."""

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


def issue(instances: Sequence[Instance], cas: Mapping[str, Material], validity: Validity,
          options: IssueOptions | None = None) -> dict[str, Material]:
    """Issue every instance given (CA rows first), signing leaves with ``cas`` or new CAs.

    Returns id -> Material. ``cas`` maps CA instance ids to existing CA material (with key).
    """
    options = options or IssueOptions()
    first = [i for i in instances if i.spec.kind in ("ca", "keypair")]
    leaves = [i for i in instances if i.spec.kind not in ("ca", "keypair")]
    estimate = len(instances) * KEYGEN_SECONDS.get(validity.algorithm, 0.05)
    use_pool = options.executor is not None or (options.procs > 1 and estimate >= _POOL_MIN_SECONDS)
    if not use_pool:
        return _issue_in(None, first, leaves, cas, validity, 1)
    if options.executor is not None:
        return _issue_in(options.executor, first, leaves, cas, validity, options.procs)
    method = options.start_method or ("fork" if threading.active_count() == 1 else "forkserver")
    with ProcessPoolExecutor(options.procs, mp_context=multiprocessing.get_context(method)) as pool:
        return _issue_in(pool, first, leaves, cas, validity, options.procs)


def _issue_in(pool: Executor | None, first: list[Instance], leaves: list[Instance],
              cas: Mapping[str, Material], validity: Validity, procs: int) -> dict[str, Material]:
    out: dict[str, Material] = {}
    out.update(_run(pool, [_item(i) for i in first], {}, validity, procs))
    if leaves:
        signers = {**{k: v for k, v in cas.items()}, **out}
        needed = {i.spec.ca for i in leaves}
        missing = sorted(n for n in needed if n not in signers or signers[n].key is None)  # type: ignore[operator]
        if missing:
            raise KeyError(f"no CA material for {', '.join(missing)}")  # caller bug: decide() prevents it
        ca_payload = {n: (signers[n].cert, signers[n].key) for n in needed if n}  # type: ignore[index]
        out.update(_run(pool, [_item(i) for i in leaves], ca_payload, validity, procs))
    return out


def _run(pool: Executor | None, items: list[_Item], ca_payload: dict, validity: Validity,
         procs: int) -> dict[str, Material]:
    if not items:
        return {}
    header = (validity.algorithm, validity.now, validity.ca_days, validity.leaf_days)
    if pool is None:
        return {i: Material(c, k) for i, c, k in _issue_job((header, ca_payload, items))}
    per_worker = 4 if validity.algorithm.startswith("RSA") else 1  # RSA keygen time varies: balance
    n_chunks = max(1, min(len(items), procs * per_worker))
    size = -(-len(items) // n_chunks)
    jobs = [(header, ca_payload, items[k:k + size]) for k in range(0, len(items), size)]
    out: dict[str, Material] = {}
    for result in pool.map(_issue_job, jobs):
        out.update((i, Material(c, k)) for i, c, k in result)
    return out


# ---- worker side (also used in-process) ----------------------------------------------------------

class _Signer:
    """A parsed CA, built once per process: name, key, AKI extension, hash, expiry."""

    __slots__ = ("name", "key", "aki", "hash", "not_after")

    def __init__(self, cert_pem: bytes, key_pem: bytes) -> None:
        cert = x509.load_pem_x509_certificate(cert_pem)
        self.name = cert.subject
        self.key = load_private_key(key_pem)
        ski = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        self.aki = _raw(x509.AuthorityKeyIdentifier(ski.digest, None, None), False)
        self.hash = signature_hash(self.key)
        self.not_after = cert.not_valid_after_utc


_SIGNERS: dict[bytes, _Signer] = {}
_NAME_ATTRS: dict[tuple[object, str], x509.NameAttribute] = {}
_EKU = {
    "server": x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
    "client": x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
    "server+client": x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
}
_EXT_CACHE: dict[tuple[str, bool], list[x509.Extension]] = {}


def _signer(cert_pem: bytes, key_pem: bytes) -> _Signer:
    digest = hashlib.sha256(cert_pem).digest()
    signer = _SIGNERS.get(digest)
    if signer is None:
        signer = _SIGNERS[digest] = _Signer(cert_pem, key_pem)
    return signer


def _attr(oid: object, value: str) -> x509.NameAttribute:
    attr = _NAME_ATTRS.get((oid, value))
    if attr is None:
        attr = _NAME_ATTRS[(oid, value)] = x509.NameAttribute(oid, value)  # type: ignore[arg-type]
    return attr


def _name(cn: str, o: Iterable[str]) -> x509.Name:
    # Go's pkix order (what kubeadm emits): O before CN.
    return x509.Name([*(_attr(NameOID.ORGANIZATION_NAME, v) for v in o), x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_usage(ca: bool, rsa_key: bool) -> x509.KeyUsage:
    # keyEncipherment only means something for RSA keys (kubeadm sets it for every key: a known wart).
    return x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=rsa_key,
                         data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=False,
                         encipher_only=False, decipher_only=False)


def _raw(value: x509.ExtensionType, critical: bool) -> x509.Extension:
    """The extension pre-encoded once: the builder then copies bytes instead of re-encoding the
    same KeyUsage/EKU/AKI for each of 5,000 certificates. The DER is cryptography's own."""
    return x509.Extension(value.oid, critical, x509.UnrecognizedExtension(value.oid, value.public_bytes()))


def _leaf_exts(usage: str, rsa_key: bool) -> list[x509.Extension]:
    exts = _EXT_CACHE.get((usage, rsa_key))
    if exts is None:
        exts = _EXT_CACHE[(usage, rsa_key)] = [_raw(_key_usage(False, rsa_key), True), _raw(_EKU[usage], False)]
    return exts


def _san(dns: tuple[str, ...], ips: tuple[str, ...]) -> x509.Extension:
    san = x509.SubjectAlternativeName([*(x509.DNSName(d) for d in dns), *(x509.IPAddress(ip_address(i)) for i in ips)])
    return x509.Extension(san.oid, False, san)


def _issue_job(job: tuple) -> list[tuple[str, bytes, bytes]]:
    """Issue one chunk. Top-level so that a process pool can pickle it by reference."""
    (algorithm, now, ca_days, leaf_days), ca_payload, items = job
    not_before = now - BACKDATE
    signers = {ca_id: _signer(*pems) for ca_id, pems in ca_payload.items()}
    leaf_end = now + timedelta(days=leaf_days)
    ends = {ca_id: min(leaf_end, s.not_after) for ca_id, s in signers.items()}
    out = []
    for kind, iid, cn, o, dns, ips, usage, ca_id in items:
        key = generate_key(algorithm)
        key_pem = private_key_pem(key)
        if kind == "keypair":
            pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
            out.append((iid, pub, key_pem))
            continue
        rsa_key = isinstance(key, rsa.RSAPrivateKey)
        public = key.public_key()
        if kind == "ca":
            name = _name(cn, o)
            ku = _key_usage(True, rsa_key)
            bc = x509.BasicConstraints(ca=True, path_length=None)
            ski = x509.SubjectKeyIdentifier.from_public_key(public)
            exts = [x509.Extension(ku.oid, True, ku), x509.Extension(bc.oid, True, bc),
                    x509.Extension(ski.oid, False, ski)]
            if dns or ips:
                exts.append(_san(dns, ips))
            builder = x509.CertificateBuilder(
                issuer_name=name, subject_name=name, public_key=public, serial_number=x509.random_serial_number(),
                not_valid_before=not_before, not_valid_after=now + timedelta(days=ca_days), extensions=exts)
            cert = builder.sign(key, signature_hash(key))
        else:
            signer = signers[ca_id]
            exts = [*_leaf_exts(usage, rsa_key), signer.aki]
            if dns or ips:
                exts.append(_san(dns, ips))
            builder = x509.CertificateBuilder(
                issuer_name=signer.name, subject_name=_name(cn, o), public_key=public,
                serial_number=x509.random_serial_number(), not_valid_before=not_before,
                not_valid_after=ends[ca_id], extensions=exts)
            cert = builder.sign(signer.key, signer.hash)
        out.append((iid, cert.public_bytes(serialization.Encoding.PEM), key_pem))
    return out
