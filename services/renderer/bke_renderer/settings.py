"""Renderer settings: the shared connection variables plus `BKE_RENDERER_*`."""
from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from bke.adapters.settings import ServiceSettings

__all__ = ["RendererSettings"]


class RendererSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_RENDERER_", extra="ignore", frozen=True)
