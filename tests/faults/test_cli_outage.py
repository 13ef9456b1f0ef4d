"""The CLI reports an outage as one clear ERROR line and exit code 1, never a traceback
(a 5 s Redis outage used to end `bke` in a ConnectionError traceback)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from bke.adapters.runtime.processes import stop_pid

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def _bke(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [["status", "x"], ["retry", "x"]])
def test_with_nats_down_the_cli_prints_one_error_line_and_exits_1(own_runtime, command):
    url = own_runtime.info.nats_url
    stop_pid(own_runtime.info.nats_pid)
    out = _bke(*command, "--nats", url)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert lines == [f"ERROR cannot reach NATS at {url}: nats: no servers available for connection"], out.stderr
