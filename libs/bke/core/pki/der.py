"""Leaf certificates assembled as DER bytes and signed with cryptography's key.sign().

Why not ``x509.CertificateBuilder`` for leaves: at 5,000 nodes with ECDSA-P256 a bare key
generation plus a CN-only builder signature costs ~40 us, of which the builder's Python objects
and re-encoding are ~13 us, and a full leaf (O, SANs, key usages, AKI, PEM) added another ~13 us.
For one CA and one usage everything in a leaf's TBSCertificate except the serial, the subject,
the public key and the SANs is the same bytes, so :class:`LeafSigner` encodes those once and each
certificate is a few concatenations plus one signature - about the cost of the signature itself.

Correctness is guarded by ``tests/unit/core/pki/test_pki_der.py``: for the same inputs the TBS bytes are
identical to CertificateBuilder's (and, RSA signatures being deterministic, the whole RSA
certificate and its PEM), across every key algorithm; openssl verifies the results elsewhere.

Deliberately not like CertificateBuilder in one way: no 64-character cap on the CN. RFC 5280's
upper bound is not enforced in practice (Go's x509, hence kubeadm, writes longer CNs, and
OpenSSL verifies them; a test checks that), and ``system:node:<hostname>`` exceeds 64 characters
for DNS-valid hostnames of 53 or more.
Only a small DER subset is written here: what X.509 leaves need (RFC 5280 section 4.1).
"""
from __future__ import annotations

import binascii
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from ipaddress import ip_address

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from .errors import CaIntegrityError

__all__ = ["LeafSigner", "ec_spki_from_pkcs8", "extension", "integer", "name", "oid", "pem", "san", "time", "tlv"]

# DER tags used below (X.690): universal types, then context-specific ones of RFC 5280.
_INTEGER, _BIT_STRING, _OCTET_STRING, _OID, _UTF8 = 0x02, 0x03, 0x04, 0x06, 0x0C
_UTC_TIME, _GENERALIZED_TIME, _SEQUENCE, _SET = 0x17, 0x18, 0x30, 0x31
_VERSION_V3 = b"\xa0\x03\x02\x01\x02"  # [0] EXPLICIT INTEGER 2
_SAN_DNS, _SAN_IP = 0x82, 0x87  # GeneralName [2] dNSName, [7] iPAddress (IMPLICIT)
_CRITICAL = b"\x01\x01\xff"  # BOOLEAN TRUE (FALSE is the default, hence omitted)


def tlv(tag: int, body: bytes) -> bytes:
    """One DER element (definite length: short form below 128, else long form)."""
    n = len(body)
    if n < 0x80:
        return bytes((tag, n)) + body
    if n < 0x100:
        return bytes((tag, 0x81, n)) + body
    if n < 0x10000:
        return bytes((tag, 0x82, n >> 8, n & 0xFF)) + body
    raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(raw))) + raw + body


def oid(dotted: str) -> bytes:
    """An OBJECT IDENTIFIER element from its dotted form."""
    arcs = [int(a) for a in dotted.split(".")]
    body = bytearray()
    for arc in [40 * arcs[0] + arcs[1], *arcs[2:]]:
        chunk = [arc & 0x7F]
        arc >>= 7
        while arc:
            chunk.append(0x80 | (arc & 0x7F))
            arc >>= 7
        body.extend(reversed(chunk))
    return tlv(_OID, bytes(body))


def integer(n: int) -> bytes:
    """A non-negative INTEGER in minimal two's complement (a leading 0 when the top bit is set)."""
    return tlv(_INTEGER, n.to_bytes(n.bit_length() // 8 + 1, "big"))


def time(dt: datetime) -> bytes:
    """RFC 5280 4.1.2.5: UTCTime through 2049, GeneralizedTime after; whole seconds, UTC
    (a naive datetime is taken as UTC, as CertificateBuilder does)."""
    dt = dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)
    if 1950 <= dt.year < 2050:
        return tlv(_UTC_TIME, dt.strftime("%y%m%d%H%M%SZ").encode())
    return tlv(_GENERALIZED_TIME, dt.strftime("%Y%m%d%H%M%SZ").encode())


_CN, _O = oid("2.5.4.3"), oid("2.5.4.10")
_O_RDNS: dict[str, bytes] = {}  # a handful of organisations, each encoded once per process


def _rdn(attr_oid: bytes, value: str) -> bytes:
    return tlv(_SET, tlv(_SEQUENCE, attr_oid + tlv(_UTF8, value.encode())))


def name(cn: str, o: Iterable[str] = ()) -> bytes:
    """A Name with one RDN per attribute, O before CN (Go's pkix order, what kubeadm emits),
    values as UTF8String (what cryptography writes)."""
    if not cn:
        raise ValueError("a certificate subject needs a non-empty CN")
    parts = []
    for value in o:
        rdn = _O_RDNS.get(value)
        if rdn is None:
            rdn = _O_RDNS[value] = _rdn(_O, value)
        parts.append(rdn)
    parts.append(_rdn(_CN, cn))
    return tlv(_SEQUENCE, b"".join(parts))


def extension(ext_oid: str, critical: bool, value_der: bytes) -> bytes:
    """Extension ::= SEQUENCE { extnID, critical BOOLEAN DEFAULT FALSE, extnValue OCTET STRING }."""
    return _extension(oid(ext_oid), critical, value_der)


def _extension(oid_der: bytes, critical: bool, value_der: bytes) -> bytes:
    return tlv(_SEQUENCE, oid_der + (_CRITICAL if critical else b"") + tlv(_OCTET_STRING, value_der))


_SAN_OID = oid("2.5.29.17")  # subjectAltName: encoded once, SANs are per certificate


def san(dns: Sequence[str], ips: Sequence[str]) -> bytes:
    """The subjectAltName extension: DNS names (A-labels, ASCII only) then IP addresses."""
    names = b"".join([*(tlv(_SAN_DNS, d.encode("ascii")) for d in dns),
                      *(tlv(_SAN_IP, ip_address(i).packed) for i in ips)])
    return _extension(_SAN_OID, False, tlv(_SEQUENCE, names))


def pem(der: bytes, label: str = "CERTIFICATE") -> bytes:
    """PEM with 64-character lines, byte for byte what cryptography writes."""
    b64 = binascii.b2a_base64(der, newline=False)
    body = b"\n".join([b64[i:i + 64] for i in range(0, len(b64), 64)])
    return b"-----BEGIN %s-----\n%s\n-----END %s-----\n" % (label.encode(), body, label.encode())


def _element(buf: bytes, pos: int) -> tuple[int, int, int]:
    """(tag, body start, body end) of the DER element at ``pos`` (definite lengths only)."""
    tag, n = buf[pos], buf[pos + 1]
    pos += 2
    if n & 0x80:
        width = n & 0x7F
        if not 1 <= width <= 4 or pos + width > len(buf):
            raise ValueError("unsupported DER length")
        n = int.from_bytes(buf[pos:pos + width], "big")
        pos += width
    if pos + n > len(buf):
        raise ValueError("truncated DER element")
    return tag, pos, pos + n


def ec_spki_from_pkcs8(pkcs8: bytes) -> bytes:
    """The SubjectPublicKeyInfo of an EC key, read from its unencrypted PKCS#8 DER.

    Why: the PKCS#8 form is written anyway (it is the key file), and it carries both halves of
    the SPKI - the algorithm identifier and, in RFC 5915's ECPrivateKey, the public point - so
    asking cryptography to serialise the public key a second time is avoidable work.
    """
    _, top, _ = _element(pkcs8, 0)  # PrivateKeyInfo SEQUENCE
    _, _, after_version = _element(pkcs8, top)  # version INTEGER
    _, _, after_alg = _element(pkcs8, after_version)  # privateKeyAlgorithm
    algorithm = pkcs8[after_version:after_alg]
    tag, inner, inner_end = _element(pkcs8, after_alg)  # privateKey OCTET STRING
    if tag != _OCTET_STRING:
        raise ValueError("not a PKCS#8 PrivateKeyInfo")
    _, pos, end = _element(pkcs8, inner)  # ECPrivateKey SEQUENCE
    end = min(end, inner_end)
    while pos < end:  # version, privateKey, [0] parameters?, [1] publicKey?
        tag, body, nxt = _element(pkcs8, pos)
        if tag == 0xA1:  # [1] EXPLICIT BIT STRING
            bit_tag, _, bit_end = _element(pkcs8, body)
            if bit_tag != _BIT_STRING:
                break
            return tlv(_SEQUENCE, algorithm + pkcs8[body:bit_end])
        pos = nxt
    raise ValueError("the EC private key carries no public key")


# AlgorithmIdentifier of the signature, by CA key type and hash (RFC 5758 / RFC 4055).
_SIG_ALG = {
    ("ec", "sha256"): tlv(_SEQUENCE, oid("1.2.840.10045.4.3.2")),
    ("ec", "sha384"): tlv(_SEQUENCE, oid("1.2.840.10045.4.3.3")),
    ("rsa", "sha256"): tlv(_SEQUENCE, oid("1.2.840.113549.1.1.11") + b"\x05\x00"),
    ("rsa", "sha384"): tlv(_SEQUENCE, oid("1.2.840.113549.1.1.12") + b"\x05\x00"),
}


class LeafSigner:
    """Issues leaves of one CA with one validity window: the constant TBS parts encoded once.

    ``extensions`` maps a usage name to the DER of the extensions every leaf of that usage
    carries, in order (before the SANs, which vary per certificate).
    """

    __slots__ = ("_key", "_sign", "_sig_alg", "_head", "_middle", "_extensions")

    def __init__(self, ca_cert: x509.Certificate, ca_key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey,
                 digest: hashes.HashAlgorithm, not_before: datetime, not_after: datetime,
                 extensions: dict[str, bytes]) -> None:
        if not_after <= not_before:
            raise CaIntegrityError(f"CA {ca_cert.subject.rfc4514_string()} expired on "
                                   f"{ca_cert.not_valid_after_utc:%Y-%m-%d}: rotate it before issuing leaves")
        kind = "ec" if isinstance(ca_key, ec.EllipticCurvePrivateKey) else "rsa"
        self._key = ca_key
        self._sig_alg = _SIG_ALG[(kind, digest.name)]
        # Bound once: key.sign with its fixed scheme arguments (ECDSA(h) or PKCS1v15(), h).
        self._sign = (ec.ECDSA(digest),) if kind == "ec" else (padding.PKCS1v15(), digest)
        self._head = _VERSION_V3  # then the serial
        # signature alg, issuer = the CA's subject bytes exactly as the CA carries them (chain
        # building compares them byte for byte), validity; then the subject.
        self._middle = (self._sig_alg + ca_cert.subject.public_bytes()
                        + tlv(_SEQUENCE, time(not_before) + time(not_after)))
        self._extensions = extensions

    def sign(self, serial: int, subject: bytes, spki: bytes, usage: str, san_ext: bytes = b"") -> bytes:
        """The certificate DER for one leaf (``subject`` from :func:`name`, ``spki`` the
        SubjectPublicKeyInfo DER of its key, ``san_ext`` from :func:`san` or empty)."""
        exts = tlv(0xA3, tlv(_SEQUENCE, self._extensions[usage] + san_ext))  # [3] EXPLICIT
        tbs = tlv(_SEQUENCE, self._head + integer(serial) + self._middle + subject + spki + exts)
        signature = self._key.sign(tbs, *self._sign)
        return tlv(_SEQUENCE, tbs + self._sig_alg + tlv(_BIT_STRING, b"\x00" + signature))
