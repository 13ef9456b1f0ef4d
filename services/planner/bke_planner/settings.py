"""Planner settings: the shared connection variables plus `BKE_PLANNER_*`."""
from __future__ import annotations

from pydantic_settings import SettingsConfigDict

from bke.adapters.settings import ServiceSettings

__all__ = ["PlannerSettings"]


class PlannerSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="BKE_PLANNER_", extra="ignore", frozen=True)

    durable: str = "planner"
    installs_durable: str = "planner-installs"  # on BKE_EVENTS: bke.v1.install.*.finished
    batch_size: int = 16
