"""What the ensure and renew operations return: references, never key bytes.

These are the payloads the certs service turns into events (``certs issued``, one event per
renewed certificate), so they are frozen pydantic models with camelCase aliases like the contracts.
"""
from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from .instances import FileRef

__all__ = ["CertsReport", "FileRef", "Reissued", "RenewedCert"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True)


class Reissued(_Model):
    instance: str
    reason: str


class CertsReport(_Model):
    """Result of one ensure: what was issued, reissued (why), reused, removed, and the node files.

    ``changed_nodes`` are the nodes whose files differ from the previous run: the ones the
    dispatcher must (re)deliver.
    """

    cluster: str
    issued: list[str]
    reissued: list[Reissued]
    reused: list[str]
    removed: list[str]
    changed_nodes: list[str]
    nodes: dict[str, list[FileRef]]  # part "key"/"kubeconfig" = secret: deliver sealed
    warnings: list[str] = []

    @property
    def changed(self) -> bool:
        return bool(self.issued or self.reissued or self.removed or self.changed_nodes)


class RenewedCert(_Model):
    """One renewed certificate instance (one event each): redistribute it to ``nodes``."""

    name: str
    instance: str
    owner: str | None
    nodes: list[str]
    serial: str  # hex
    not_after: datetime
