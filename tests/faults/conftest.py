"""Fault tests stop and restart NATS and Redis: each test gets a runtime of its own."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bke.adapters.runtime import EmbeddedRuntime
from tests.trust_helpers import operator_box, operator_key_file

__all__ = ["operator_box", "operator_key_file", "own_runtime"]  # the trust fixtures: signed commands, as in tests/integration


@pytest.fixture
def own_runtime(tmp_path: Path) -> Iterator[EmbeddedRuntime]:
    rt = EmbeddedRuntime(tmp_path / "runtime", auth=False)  # handler-level faults; the lab tests run with auth
    rt.ensure_started()
    try:
        yield rt
    finally:
        rt.stop()
