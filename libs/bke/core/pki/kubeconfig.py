"""Kubeconfig files with the client certificate and key embedded, as kubeadm writes them.

Rendered from a fixed template (keys in kubeadm's order) so the same inputs always give the same
bytes - the ensure step's idempotence extends to the files on the nodes - and checked before it
is returned: credentials only, never an exec plugin or auth provider. The directory store reads
the embedded PEMs back with :func:`embedded_material` (two anchored lines, no YAML parser needed).
"""
from __future__ import annotations

import base64
import binascii
import json
import re

from bke.core.host_actions.kubeconfigs import kubeconfig_problems, may_name_a_program
from .material import Material

__all__ = ["embedded_material", "render_kubeconfig"]

_TEMPLATE = """\
apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: {server}
  name: {cluster}
contexts:
- context:
    cluster: {cluster}
    user: {user}
  name: {user}@{cluster}
current-context: {user}@{cluster}
kind: Config
preferences: {{}}
users:
- name: {user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
"""
_SERVER = re.compile(r"https://[A-Za-z0-9.\-]+(:[0-9]{1,5})?|https://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")
_CERT = re.compile(rb"^    client-certificate-data: ([A-Za-z0-9+/=]+)$", re.M)
_KEY = re.compile(rb"^    client-key-data: ([A-Za-z0-9+/=]+)$", re.M)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _quote(text: str) -> str:
    # Names like "system:node:m1" are valid plain YAML scalars; anything unusual is a JSON string
    # (a YAML double-quoted scalar, ASCII with every break and control character escaped)
    return text if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9:._@/-]*", text) else json.dumps(text)


def render_kubeconfig(*, cluster: str, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes,
                      user: str) -> bytes:
    """The kubeconfig, checked before it leaves: credentials only, never an exec plugin or auth
    provider (bke.core.host_actions.kubeconfigs; the agent refuses to write one that has), else
    ValueError. Each value is one scalar on its template line (a plain https URL, base64, a
    plain or JSON-quoted name), so the template's keys are all the document has; the text is
    parsed back in full when it so much as mentions a forbidden key (a parse costs 15 times the
    rendering, and the certs service renders one per node)."""
    if not _SERVER.fullmatch(server):
        raise ValueError(f"kubeconfig of {user!r} in {cluster!r}: server {server!r} is not a plain https URL")
    out = _TEMPLATE.format(ca=_b64(ca_pem), server=server, cluster=_quote(cluster), user=_quote(user),
                           cert=_b64(cert_pem), key=_b64(key_pem)).encode()
    problems = kubeconfig_problems(out) if may_name_a_program(out) else []
    if problems:
        raise ValueError(f"kubeconfig of {user!r} in {cluster!r}: {'; '.join(problems)}")
    return out


def embedded_material(text: bytes) -> Material | None:
    """The client cert + key of a kubeconfig we rendered; None if absent or malformed."""
    cert, key = _CERT.search(text), _KEY.search(text)
    if not cert or not key:
        return None
    try:
        return Material(base64.b64decode(cert.group(1), validate=True), base64.b64decode(key.group(1), validate=True))
    except (binascii.Error, ValueError):
        return None
