"""The memory tier's lab: every service from its composition root on the in-memory bus, with
fakeredis behind the stores (lab.py, services.py); stopped after each test."""
from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bke.core.secrets import SecretBox
from tests.trust_helpers import operator_box, operator_key_file

from .lab import MemoryLab

__all__ = ["lab", "operator_box", "operator_key_file"]


@pytest.fixture
async def lab(monkeypatch: pytest.MonkeyPatch, operator_box: SecretBox, tmp_path: Path) -> AsyncIterator[MemoryLab]:
    memory = MemoryLab(monkeypatch, operator_box, tmp_path)
    await memory.start()
    try:
        yield memory
    finally:
        await memory.stop()
