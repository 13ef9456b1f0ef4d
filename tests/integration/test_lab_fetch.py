"""The lab backend in download mode (`bke lab install --http-repo`): a FetchFile downloads from a
real HTTP server (`bke bundle serve`) into the node's tree, verified like on a host; a wrong
checksum fails the step and leaves nothing, and a path out of the tree is refused."""
from __future__ import annotations

import hashlib
import threading
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.adapters.bundle import make_server
from bke.contracts.agent import AgentCommand, StepResult
from bke.contracts.agent_steps import FetchFile, Step
from bke_agent import AgentIdentity, Executor, LabBackend

pytestmark = pytest.mark.integration
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
DATA = b"#!/bin/sh\n# a real runc, as far as this test knows\nexit 0\n"


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "bundle"
    (root / "runc/1.3.0/linux/amd64").mkdir(parents=True)
    (root / "runc/1.3.0/linux/amd64/runc").write_bytes(DATA)
    server = make_server(root, "127.0.0.1:0")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def _run(backend: LabBackend, *steps: Step) -> list[StepResult]:
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t", steps=list(steps))
    return (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)).steps


async def test_download_mode_fetches_and_verifies_into_the_tree(repo, tmp_path: Path) -> None:
    root = tmp_path / "hosts/n1"
    root.mkdir(parents=True)
    backend = LabBackend(root, "127.0.0.1", fetch="download")
    url = f"{repo}/runc/1.3.0/linux/amd64/runc"
    step = FetchFile(id="fetch:runc", url=url, path="/usr/local/sbin/runc", sha256=hashlib.sha256(DATA).hexdigest())
    first, again = await _run(backend, step, step.model_copy(update={"id": "again"}))
    assert (first.status, again.status) == ("Succeeded", "Skipped")
    f = root / "usr/local/sbin/runc"
    assert f.read_bytes() == DATA and f.stat().st_mode & 0o777 == 0o755
    f.unlink()
    [bad] = await _run(backend, step.model_copy(update={"id": "bad", "sha256": "0" * 64}))
    assert bad.status == "Failed" and "does not match the expected" in bad.stderr
    assert not f.exists() and not list(f.parent.glob(".runc.*"))
    [missing] = await _run(backend, step.model_copy(update={"id": "404", "url": url + "-nope"}))
    assert missing.status == "Failed" and "HTTP 404" in missing.stderr
    [escape] = await _run(backend, step.model_copy(update={"id": "esc", "path": "/../../outside"}))
    assert escape.status == "Failed" and not (tmp_path / "outside").exists()
