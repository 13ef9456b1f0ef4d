"""The lab writes the pin of `bke agent bootstrap` where it makes the command-signing key:
`<lab>/command-key.pub` holds the public line the lab's agents are given, and it pins that key
(bke.lab.trust; the deployment's `bke state init --command-key-out` is in test_state_cli.py)."""
from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from bke.lab.trust import ensure_lab_command_key
from bke.adapters.runtime import RuntimeInfo
from bke.lab.key_files import ensure_lab_key_files
from bke.core.secrets.command_key_pin import check_pinned, read_pin_file

pytestmark = pytest.mark.integration


async def test_the_lab_writes_the_key_it_gives_its_agents(redis_url: str, redis_client: aioredis.Redis, tmp_path) -> None:
    lab = tmp_path / "lab"
    ensure_lab_key_files(lab)
    info = RuntimeInfo("nats://127.0.0.1:1", redis_url, 0, 0, "http://127.0.0.1:1")
    line = ensure_lab_command_key(info, lab)
    pub = tmp_path / "lab" / "command-key.pub"
    assert pub.read_text() == line + "\n"
    assert check_pinned(line, read_pin_file(pub)).public_line == line
    assert ensure_lab_command_key(info, lab) == line and pub.read_text() == line + "\n"  # kept
