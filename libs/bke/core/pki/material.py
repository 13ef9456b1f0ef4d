"""Issued material and what the ensure step reads back from a certificate.

Why separate: stores, the ensure core and the expiry report all handle :class:`Material`
(PEM bytes) and need the same few facts from a certificate (:class:`CertInfo`), parsed once.
``Material.__repr__`` never shows key bytes, so a stray log or assertion message cannot leak one.
"""
from __future__ import annotations

import ipaddress
import warnings
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .keys import key_algorithm_of

__all__ = ["CertInfo", "Material", "cert_info"]

# cryptography warns when it parses a CN over RFC 5280's advisory 64 characters. Ours can be
# longer on purpose (``system:node:<hostname>``, see bke.core.pki.der), so that warning is noise.
warnings.filterwarnings("ignore", message="Attribute's length must be", category=UserWarning)


@dataclass(frozen=True, slots=True)
class Material:
    """One instance's PEMs: the certificate (public key PEM for ``sa``) and the private key."""

    cert: bytes
    key: bytes | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return f"Material(cert={len(self.cert)} bytes, key={'<redacted>' if self.key else None})"


_EKU_NAMES = {ExtendedKeyUsageOID.SERVER_AUTH: "server", ExtendedKeyUsageOID.CLIENT_AUTH: "client"}


@dataclass(frozen=True, slots=True)
class CertInfo:
    cn: str
    o: tuple[str, ...]
    dns: tuple[str, ...]  # SAN order kept: renewal copies them as they are
    ips: tuple[str, ...]
    not_before: datetime
    not_after: datetime
    serial: int
    usages: frozenset[str]  # "server", "client"
    is_ca: bool
    ski: bytes | None
    aki: bytes | None
    issuer_cn: str
    key_algorithm: str


_E = TypeVar("_E", bound=x509.ExtensionType)


def _ext(cert: x509.Certificate, cls: type[_E]) -> _E | None:
    try:
        return cert.extensions.get_extension_for_class(cls).value
    except x509.ExtensionNotFound:
        return None


def cert_info(pem: bytes) -> CertInfo:
    """Parse a certificate PEM (raises ValueError if it is not one)."""
    cert = x509.load_pem_x509_certificate(pem)
    subject = cert.subject
    cn = [a.value for a in subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    issuer_cn = [a.value for a in cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)]
    san = _ext(cert, x509.SubjectAlternativeName)
    eku = _ext(cert, x509.ExtendedKeyUsage)
    bc = _ext(cert, x509.BasicConstraints)
    ski = _ext(cert, x509.SubjectKeyIdentifier)
    aki = _ext(cert, x509.AuthorityKeyIdentifier)
    return CertInfo(
        cn=str(cn[0]) if cn else "",
        o=tuple(str(a.value) for a in subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)),
        dns=tuple(san.get_values_for_type(x509.DNSName)) if san else (),
        # ignore: cryptography types a SAN IP as an address or a network; ip_address() takes the
        # address and raises ValueError for a network (a malformed certificate), as documented
        ips=tuple(str(ipaddress.ip_address(ip)) for ip in san.get_values_for_type(x509.IPAddress)) if san else (),  # type: ignore[arg-type]
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        serial=cert.serial_number,
        usages=frozenset(_EKU_NAMES.get(u, u.dotted_string) for u in eku) if eku else frozenset(),
        is_ca=bool(bc and bc.ca),
        ski=ski.digest if ski else None,
        aki=aki.key_identifier if aki else None,
        issuer_cn=str(issuer_cn[0]) if issuer_cn else "",
        key_algorithm=key_algorithm_of(cert.public_key()),
    )
