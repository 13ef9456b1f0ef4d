"""Kubeconfig files with the client certificate and key embedded, as kubeadm writes them.

Rendered from a fixed template (keys in kubeadm's order) so the same inputs always give the same
bytes - the ensure step's idempotence extends to the files on the nodes - and parsed back before
it is returned: credentials only, never an exec plugin or auth provider. The directory store reads
the embedded PEMs back with :func:`embedded_material` (two anchored lines, no YAML parser needed).
"""
from __future__ import annotations

import base64
import binascii
import re

from ..host_actions.kubeconfigs import kubeconfig_problems
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
_CERT = re.compile(rb"^    client-certificate-data: ([A-Za-z0-9+/=]+)$", re.M)
_KEY = re.compile(rb"^    client-key-data: ([A-Za-z0-9+/=]+)$", re.M)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _quote(text: str) -> str:
    # Names like "system:node:m1" are valid plain YAML scalars, but quote anything unusual.
    return text if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9:._@/-]*", text) else '"' + text.replace('"', '\\"') + '"'


def render_kubeconfig(*, cluster: str, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes,
                      user: str) -> bytes:
    """The kubeconfig, parsed back before it leaves: one mapping with no exec plugin or auth
    provider anywhere (bke.host_actions.kubeconfigs; the agent refuses to write one that has),
    else ValueError."""
    out = _TEMPLATE.format(ca=_b64(ca_pem), server=server, cluster=_quote(cluster), user=_quote(user),
                           cert=_b64(cert_pem), key=_b64(key_pem)).encode()
    problems = kubeconfig_problems(out)
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
