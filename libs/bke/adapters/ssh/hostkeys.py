"""Host-key policy: which server keys BKE accepts, decided before anything is sent.

Why: the original installer accepted any host key and then sent a password, so whoever answered on
the node's address got both. Here the server's key must be known in advance — from an OpenSSH
``known_hosts`` file, or pinned as a ``SHA256:...`` fingerprint (what ``ssh-keygen -lf`` prints) —
and an unknown or different key ends the connection during the key exchange, before
authentication, with a message naming the node, the address and the fingerprint seen.

This module is the pure part: parsing the options into a policy and deciding on a key seen. Reading
``known_hosts`` (hashed names, ``[host]:port``, ``@revoked``) is done by the client adapter with
asyncssh's parser, which hands back the fingerprints that apply to a host as an
:class:`Expectation`.
"""
from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Expectation",
    "HostKeyDecision",
    "HostKeyPolicy",
    "KnownHostsPolicy",
    "PinnedPolicy",
    "SeenKey",
    "decide_host_key",
    "normalize_fingerprint",
    "policy_from_options",
]

_PIN = re.compile(r"^(?:(?P<node>[a-z0-9][-a-z0-9.]*)=)?(?P<fp>\S+)$")


def normalize_fingerprint(text: str) -> str:
    """``SHA256:<43 base64 chars>`` (the OpenSSH form), or ValueError. MD5 fingerprints are refused."""
    value = text.strip()
    if not value.startswith("SHA256:"):
        raise ValueError(f"host key fingerprint {text!r} must be SHA256:... (as printed by `ssh-keygen -lf`)")
    body = value.removeprefix("SHA256:").rstrip("=")
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except binascii.Error:
        raise ValueError(f"host key fingerprint {text!r} is not valid base64") from None
    if len(raw) != 32:
        raise ValueError(f"host key fingerprint {text!r} is not a SHA-256 digest")
    return "SHA256:" + body


@dataclass(frozen=True)
class KnownHostsPolicy:
    """Trust the keys an OpenSSH known_hosts file lists for the node's address or name."""

    path: Path


@dataclass(frozen=True)
class PinnedPolicy:
    """Trust one fingerprint: for every node (``default``) and/or per node name."""

    default: str | None = None
    per_node: tuple[tuple[str, str], ...] = ()

    def for_node(self, node: str) -> str | None:
        return dict(self.per_node).get(node, self.default)


HostKeyPolicy = KnownHostsPolicy | PinnedPolicy


def policy_from_options(known_hosts: Path | None, fingerprints: Sequence[str]) -> HostKeyPolicy:
    """Exactly one source of trust. Pins are ``SHA256:...`` (every node) or ``NODE=SHA256:...``."""
    if known_hosts is not None and fingerprints:
        raise ValueError("give either --known-hosts or --host-key-fingerprint, not both")
    if known_hosts is not None:
        return KnownHostsPolicy(known_hosts)
    if not fingerprints:
        raise ValueError(
            "refusing to connect without verifying host keys: pass --known-hosts FILE or "
            "--host-key-fingerprint SHA256:... (see docs/agent-bootstrap.md)"
        )
    default: str | None = None
    per_node: dict[str, str] = {}
    for item in fingerprints:
        m = _PIN.match(item.strip())
        if not m:
            raise ValueError(f"host key fingerprint {item!r} must be SHA256:... or NODE=SHA256:...")
        fp = normalize_fingerprint(m["fp"])
        if m["node"] is None:
            if default is not None and default != fp:
                raise ValueError("more than one fingerprint for every node; use NODE=SHA256:... per node")
            default = fp
        else:
            per_node[m["node"]] = fp
    return PinnedPolicy(default, tuple(sorted(per_node.items())))


@dataclass(frozen=True)
class SeenKey:
    """The key the server presented during the key exchange."""

    algorithm: str
    fingerprint: str  # SHA256:...


@dataclass(frozen=True)
class Expectation:
    """What this host's key may be. ``source`` names where the trust comes from, for messages."""

    source: str
    trusted: frozenset[str] = field(default_factory=frozenset)
    revoked: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class HostKeyDecision:
    accepted: bool
    message: str
    fingerprint: str


def decide_host_key(target: str, seen: SeenKey, expected: Expectation) -> HostKeyDecision:
    """Accept only a key listed for this host and not revoked. ``target`` is "node (ip:port)"."""
    presented = f"the server presented {seen.algorithm} {seen.fingerprint}"
    # A revoked key is refused even when it is also listed as trusted, as OpenSSH does.
    if seen.fingerprint in expected.revoked:
        return _refuse(seen, f"host key for {target} is revoked: {presented}, marked @revoked in {expected.source}")
    if seen.fingerprint in expected.trusted:
        return HostKeyDecision(True, f"host key for {target} verified: {seen.algorithm} {seen.fingerprint}", seen.fingerprint)
    if not expected.trusted:
        return _refuse(seen, (
            f"host key for {target} is unknown: {presented}, and {expected.source} has no key for this "
            "host. Check that fingerprint on the node (ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), "
            "then add the key to known_hosts or pin it with --host-key-fingerprint"
        ))
    wanted = ", ".join(sorted(expected.trusted))
    return _refuse(seen, (
        f"host key for {target} does not match: {presented}, {expected.source} expects {wanted}. "
        "The key changed or someone is intercepting the connection; nothing was sent"
    ))


def _refuse(seen: SeenKey, message: str) -> HostKeyDecision:
    return HostKeyDecision(False, message, seen.fingerprint)
