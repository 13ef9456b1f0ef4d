"""Restart a static pod on a real node: take its manifest away, wait until the pod is gone,
put the manifest back.

Why this way: the kubelet restarts a static pod only when its manifest changes or disappears,
never because a certificate it mounts changed; moving the manifest out and back is what
kubeadm's documentation tells operators to do after `kubeadm certs renew`, and it needs no
container runtime client on the node. The manifest waits in `STASH_DIR` (on the same file
system, so the moves are atomic renames); a step interrupted after the first move finds it
there and finishes the job instead of failing, so a retried step is safe.

How the agent knows the old pod is gone: its health port stops accepting connections (a TCP
connect, as an etcd restore's park: backends/restore.py). Not an HTTPS request: nothing is
sent or read, so there is no answer to trust, and a server that fails verification would
otherwise look gone while it still runs. Without a health URL it waits `KUBELET_FILE_CHECK_S`,
the kubelet's default fileCheckFrequency.
"""
from __future__ import annotations

import asyncio
import os
from pathlib import Path

from bke.contracts.agent_steps import RestartStaticPod

from ..errors import PermanentStepError
from ..fsutil import fsync_dir
from .base import StepOutcome
from .paths import PathPolicy
from .restore import wait_port_closed

__all__ = ["STASH_DIR", "restart_by_manifest"]

STASH_DIR = "/etc/kubernetes/.bke-restart"
KUBELET_FILE_CHECK_S = 20.0


async def restart_by_manifest(policy: PathPolicy, step: RestartStaticPod) -> StepOutcome:
    manifest = policy.local(step.manifest)
    stash = policy.local(f"{STASH_DIR}/{Path(step.manifest).name}")
    if manifest.exists():
        stash.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.replace(manifest, stash)
        fsync_dir(manifest.parent)
    elif not stash.exists():
        raise PermanentStepError(f"{step.manifest}: no such static pod manifest on this node")
    # else: an earlier attempt moved it out; finish that restart
    budget = max(1.0, step.timeout_s - 5.0)
    try:
        if step.health_url:
            await wait_port_closed(step.health_url, budget)
        else:
            await asyncio.sleep(min(KUBELET_FILE_CHECK_S, budget))  # the kubelet's own period
    finally:
        # never leave a node without its pod, even when the wait failed
        os.replace(stash, manifest)
        fsync_dir(manifest.parent)
    return StepOutcome(stdout=f"{step.manifest}: taken away until the pod stopped, then put back\n")
