"""`bke agent provision`: an agent key made where BKE has no SSH (a container) is recorded by the
operator from the line `bke-agent init` printed, on a real NATS with the certs service."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bke.adapters.bus.streams import ensure_streams
from bke.adapters.state.keys.certs import provisioned_agents_key
from bke_certs.app import create_service as create_certs
from bke_certs.settings import CertsSettings
from bke_cli.main import main

pytestmark = pytest.mark.integration


def _init_line(root: Path) -> str:
    env = dict(os.environ, BKE_AGENT_CLUSTER="box", BKE_AGENT_NODE="node1", BKE_AGENT_BACKEND="lab",
               BKE_AGENT_ROOT=str(root), BKE_AGENT_IP="127.0.0.1", BKE_NATS_URL="nats://127.0.0.1:1")
    out = subprocess.run([str(Path(sys.executable).parent / "bke-agent"), "init"], env=env, capture_output=True,
                         text=True, timeout=60, check=True)
    return next(ln for ln in out.stdout.splitlines() if ln.startswith("bke-agent-x25519 "))


async def test_an_agent_key_made_in_a_container_is_recorded(nats_url, redis_url, redis_client, nats_client,
                                                              operator_box, tmp_path, capsys) -> None:
    await ensure_streams(nats_client.jetstream())
    svc = create_certs(CertsSettings(nats_url=nats_url, redis_url=redis_url, renew_interval_s=0, processes=1))
    await svc.start()
    r = Redis.from_url(redis_url)
    try:
        line = await asyncio.to_thread(_init_line, tmp_path / "node1")
        code = await asyncio.to_thread(main, ["agent", "provision", line, "--cluster", "box", "--node", "node1",
                                              "--nats", nats_url])
        out, err = capsys.readouterr()
        assert code == 0, err
        agent_id = out.split()[1]
        recorded = await r.hget(provisioned_agents_key("box"), "node1")
        assert recorded is not None and agent_id.encode() in recorded and line.split()[1].encode() in recorded

        # a line that is no key: refused naming it, nothing recorded
        code = await asyncio.to_thread(main, ["agent", "provision", "bke-agent-x25519 not-base64!", "--cluster", "box",
                                              "--node", "node2", "--nats", nats_url])
        assert code == 2 and "KEY_LINE" in capsys.readouterr()[1]
        assert await r.hget(provisioned_agents_key("box"), "node2") is None
    finally:
        await r.aclose()
        await svc.stop()
