"""bke.adapters.runtime.processes.is_ours / stop_ours: a PID read from a state file is stopped only
while it still runs in the data directory it was started in (never a process that took its number)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bke.adapters.runtime.processes import is_ours, pid_alive, stop_ours


def test_only_the_process_in_its_own_directory_is_stopped(tmp_path: Path) -> None:
    ours, other = tmp_path / "ours", tmp_path / "other"
    ours.mkdir()
    other.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=ours)
    try:
        assert is_ours(proc.pid, ours) and not is_ours(proc.pid, other) and not is_ours(0, ours)
        assert stop_ours([(proc.pid, other), (0, ours)], timeout=5.0) == []
        assert proc.poll() is None  # named with another directory: left running
        assert stop_ours([(proc.pid, ours)], timeout=5.0) == [proc.pid]
        proc.wait(timeout=10)
        assert not pid_alive(proc.pid)
    finally:
        proc.kill()
        proc.wait()
