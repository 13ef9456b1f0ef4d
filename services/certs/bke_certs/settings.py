"""Certs settings: the shared connection variables, plus `BKE_CERTS_*`. Its at-rest keys, `pki` and
`api`, are files named by BKE_KEY_FILE_PKI and BKE_KEY_FILE_API (bke.core.secrets.key_kinds)."""
from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from bke.adapters.settings import ServiceSettings

__all__ = ["CertsSettings"]


class CertsSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_CERTS_", extra="ignore", frozen=True)

    processes: int | None = None  # key-generation worker processes; None: one per core
    # Automatic renewal: every `renew_interval_s` (0: never), renew what expires within
    # `renew_within_days` (BKE_CERTS_RENEW_WITHIN_DAYS).
    renew_interval_s: float = Field(3600.0, ge=0)
    renew_within_days: float = Field(30.0, gt=0, le=3650)
