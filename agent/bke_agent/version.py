"""The version this agent runs: its installed distribution's, so that an agent installed from a
wheel built with another version (an update, or the lab's rehearsal of one) reports that one on
its registration and every result; the contracts' AGENT_VERSION when not installed as a
distribution (a source checkout)."""
from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from bke.contracts.agent import AGENT_VERSION

__all__ = ["RUNNING_VERSION"]


def _installed() -> str:
    try:
        return version("bke")
    except PackageNotFoundError:
        return AGENT_VERSION


RUNNING_VERSION = _installed()
