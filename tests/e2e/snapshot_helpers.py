"""Snapshots taken in a lab as the upgrader asks for them: a signed `EtcdSnapshot` command per
etcd cluster, published with the dispatcher's identity and the deployment's command key."""
from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from bke.adapters.auth.permissions import inbox_prefix
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.agent import AgentCommand, CommandResult, agent_subject
from bke.core.etcdsnap.step import SnapshotTarget, snapshot_step
from bke.lab.identities import creds_path
from bke.lab.key_files import lab_key_file
from bke.core.secrets import load_secret_box
from bke.core.secrets.signing import ensure_command_key_sync, sign_command
from bke.core.secrets.snapshot_key import SnapshotKey, ensure_snapshot_key_sync
from bke.core.upgrade.run import upgrade_command_id
from bke.adapters.state.command_signing import read_bindings
from bke.adapters.state.keys.trust import command_signing_key, etcd_snapshot_key

from .lab_helpers import Lab

__all__ = ["bke", "take_snapshots"]


def bke(lab_env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    """The `bke` CLI of this venv, with only the given BKE_* variables, no terminal."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BKE_")}, **lab_env, "COLUMNS": "200"}
    return subprocess.run([str(Path(sys.executable).parent / "bke"), *argv], capture_output=True, text=True,
                          timeout=300, env=env, check=False, stdin=subprocess.DEVNULL)


async def take_snapshots(lab: Lab, targets: list[SnapshotTarget], request_id: str) -> SnapshotKey:
    """Snapshot each target's etcd cluster on its node; every command must succeed. Returns the
    deployment's snapshot key (made by the lab's start, as `bke state init` makes it)."""
    cluster, plan = lab.plan.cluster, lab.plan
    r = Redis.from_url(lab.info.redis_url)
    try:
        signer = ensure_command_key_sync(r, command_signing_key(), load_secret_box(lab_key_file(lab.workdir, "signing")))
        skey = ensure_snapshot_key_sync(r, etcd_snapshot_key(), load_secret_box(lab_key_file(lab.workdir, "snapshot")))
    finally:
        r.close()
    # bound to each receiver as the dispatcher binds its commands (its provisioned key, the
    # cluster's incarnation: bke.core.secrets.binding)
    ar = AsyncRedis.from_url(lab.info.redis_url)
    try:
        bindings = await read_bindings(ar, cluster, [t.node for t in targets])
    finally:
        await ar.aclose()
    dispatcher = await connect_nats(BusAccess(lab.info.nats_url, creds_path(lab.workdir, "dispatcher"),
                                              inbox_prefix("dispatcher"), lab.access.tls_ca))
    try:
        now = datetime.now(timezone.utc)
        subs = {t.node: await dispatcher.subscribe(agent_subject(cluster, t.node, "result")) for t in targets}
        # as the upgrader's etcd-snapshots step names them (bke.core.host_actions.origins)
        ids = {t.node: upgrade_command_id(cluster, request_id, "etcd-snapshots", t.etcd_cluster, t.node) for t in targets}
        for t in targets:
            step = snapshot_step(plan, t.etcd_cluster, t.node, skey.public_b64, now, request_id=request_id)
            cmd = AgentCommand(command_id=ids[t.node], cluster=cluster, node=t.node,
                               phase="upgrade:etcd-snapshots", issued_at=now.isoformat(), steps=[step])
            await dispatcher.jetstream().publish(agent_subject(cluster, t.node, "command"),
                                                 sign_command(cmd, signer, binding=bindings[t.node]).to_bytes())
        for t in targets:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 120
            while True:  # the node's other results (its health rounds) come on the same subject
                msg = await subs[t.node].next_msg(timeout=max(deadline - loop.time(), 0.1))
                result = CommandResult.model_validate_json(msg.data)
                if result.command_id == ids[t.node]:
                    break
            assert result.status == "Succeeded", result.model_dump_json(indent=1)
            assert "etcd's hash checked" in result.steps[0].stdout
    finally:
        await dispatcher.close()
    return skey
