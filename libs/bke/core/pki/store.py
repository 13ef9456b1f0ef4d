"""The store protocol for PKI material, and the snapshot it loads and saves.

Why a protocol: the same ensure / renew / bundle operations run against Redis (the certs
service) and against a directory (``bke certs issue --out DIR``); adapters only move bytes and
encrypt private keys at rest with the operator's :class:`~bke.core.secrets.SecretBox`.

Contract for adapters:

* every private key is stored encrypted (AAD ``b"<cluster>/<instance>"``), except node files in
  the directory layout, which *are* the node's files (0600);
* ``load(..., box=None)`` returns certificates only (``Material.key`` is None): enough for
  ``check-expiration``, which must not need the secret key;
* ``save`` writes only what changed (so a second identical run leaves the bytes untouched) and
  raises :class:`~bke.core.pki.errors.StoreConflict` if the store moved since ``expected_version``.
"""
from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from bke.core.secrets import SecretBox
from .manifest import Manifest
from .material import Material

__all__ = ["PkiStore", "Snapshot", "key_aad"]


@dataclass(frozen=True)
class Snapshot:
    manifest: Manifest
    materials: Mapping[str, Material]
    version: str | None = None  # opaque to callers: what the store saw when loading


def key_aad(cluster: str, instance: str) -> bytes:
    """Binds an encrypted key to its record: a blob moved to another instance will not open."""
    return f"{cluster}/{instance}".encode()


class PkiStore(Protocol):
    async def load(self, cluster: str, box: SecretBox | None,
                   ids: Collection[str] | None = None) -> Snapshot | None:
        """The stored PKI of ``cluster`` (None if there is none); only ``ids`` if given."""
        ...

    async def save(self, snapshot: Snapshot, changed: Collection[str], box: SecretBox,
                   expected_version: str | None) -> None:
        """Store ``snapshot`` (the complete new state); ``changed`` ids have new material."""
        ...
