"""The lab provisions its agents the way a deployment does (agents trust only BKE).

    ensure_lab_command_key   the deployment's command-signing key, made once and stored
                             encrypted in Redis (bke.core.secrets.signing, with the lab's `signing`
                             key); its public line is given to every agent
                             (BKE_AGENT_COMMAND_KEY) and written to `<lab>/command-key.pub`, the
                             pin of a `bke agent bootstrap` of real nodes against the lab
                             (`--command-key-file`)
    ensure_lab_record_keys   the plan and render writers' signing keys (bke.adapters.state.record_keys,
                             with the lab's `plan` and `render` keys), made as the admin before its
                             services start: the runtime makes them when it starts, and a store
                             emptied under a running lab has none
    provision_lab_agents     each agent's key is made before it starts (`bke-agent init` on the
                             node's state, as `bke agent bootstrap` does over SSH) and recorded
                             through the provisioning channel (bke.adapters.provisioning); the agent's
                             registration is then the only one the certs service seals to

Why `bke-agent init` and not the agent's identity module: libraries import no agent code
(import-linter), and running the same command as the SSH bootstrap keeps one way to make a key.
"""
from __future__ import annotations

import asyncio
import base64
import subprocess
from concurrent.futures import ThreadPoolExecutor
import sys
from datetime import datetime, timezone
from pathlib import Path

from redis import Redis

from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.agent import ProvisionAgent
from bke.adapters.provisioning import provision_agent
from bke.adapters.runtime import RuntimeInfo
from bke.adapters.runtime.declare import run_blocking
from bke.core.secrets import load_secret_box
from bke.core.secrets.sealing import agent_key_id, public_key_from_raw
from bke.core.secrets.command_key_pin import COMMAND_KEY_FILE, write_command_key_file
from bke.core.secrets.signing import ensure_command_key_sync
from .key_files import lab_key_file
from bke.adapters.state.keys.trust import command_signing_key
from bke.adapters.state.record_keys import ensure_record_keys_sync
from bke.core.secrets.record_signing import WRITERS

__all__ = ["ensure_lab_command_key", "ensure_lab_record_keys", "provision_lab_agents"]

# A deadline, not a wait: `bke-agent init` takes about 2 s, but on a loaded 2-core machine
# (several labs at once, load average 25) its interpreter start alone passed 60 s.
INIT_TIMEOUT_S = 180.0


def ensure_lab_command_key(info: RuntimeInfo, workdir: Path) -> str:
    """The public line of the deployment's command-signing key (made if missing, encrypted with
    the lab's `signing` key, bke.lab.key_files), also written as `<lab>/command-key.pub`."""
    r = Redis.from_url(info.redis_url)
    try:
        box = load_secret_box(lab_key_file(workdir, "signing"))
        key = ensure_command_key_sync(r, command_signing_key(), box).verify_key
    finally:
        r.close()
    write_command_key_file(workdir / COMMAND_KEY_FILE, key)
    return key.public_line


def ensure_lab_record_keys(info: RuntimeInfo, workdir: Path) -> None:
    """The writers' signing keys, made if missing (module docstring); kept if there."""
    r = Redis.from_url(info.redis_url)
    try:
        ensure_record_keys_sync(r, {w: load_secret_box(lab_key_file(workdir, w)) for w in WRITERS})
    finally:
        r.close()


def _agent_key(env: dict[str, str]) -> tuple[str, str]:
    """Run `bke-agent init` with the agent's own environment: (agent id, base64 public key)."""
    out = subprocess.run([str(Path(sys.executable).parent / "bke-agent"), "init"], env=env, capture_output=True,
                         text=True, timeout=INIT_TIMEOUT_S, check=False)
    lines = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("bke-agent-x25519 ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"bke-agent init failed for {env.get('BKE_AGENT_NODE')}: {out.stderr.strip()[-500:]}")
    b64 = lines[-1][1]
    return agent_key_id(public_key_from_raw(base64.b64decode(b64))), b64


def provision_lab_agents(access: BusAccess, cluster: str, envs: dict[str, dict[str, str]],
                         timeout_s: float = 60.0) -> dict[str, str]:
    """Make each node's agent key (idempotent: an existing key is kept) and record it; node -> agent id."""
    # side by side: each init is a process that spends its time importing the agent (a few
    # seconds under load), and a lab starts every node's agent at once
    with ThreadPoolExecutor(max_workers=8) as pool:
        keys = dict(zip(envs, pool.map(_agent_key, envs.values())))
    if not keys:
        return {}

    async def record() -> None:
        nc = await connect_nats(access, name="bke-lab-provision")  # the operator: only it may provision
        try:
            at = datetime.now(timezone.utc).isoformat()
            await asyncio.gather(*(
                provision_agent(nc, ProvisionAgent(cluster=cluster, node=node, agent_id=aid, seal_public_key_b64=b64,
                                                   at=at), timeout_s)
                for node, (aid, b64) in keys.items()))
        finally:
            await nc.close()

    run_blocking(record())
    return {node: aid for node, (aid, _) in keys.items()}
