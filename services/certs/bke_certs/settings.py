"""Certs settings: the shared connection variables, BKE_SECRET_KEY_FILE, plus `BKE_CERTS_*`."""
from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from bke.settings import ServiceSettings

__all__ = ["CertsSettings"]


class CertsSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_CERTS_", extra="ignore", frozen=True)

    processes: int | None = None  # key-generation worker processes; None: one per core
