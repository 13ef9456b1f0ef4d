"""Every e2e test gets its own lab, always taken down (by PID) afterwards."""
from __future__ import annotations

from pathlib import Path

import pytest

from .lab_helpers import Lab


@pytest.fixture
def lab_factory(tmp_path):
    labs = []

    def make(spec: str, agents: bool = True, fetch: bool = False):
        lab = Lab(tmp_path / f"lab{len(labs)}", Path(spec), fetch=fetch).start(agents=agents)
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.down()


