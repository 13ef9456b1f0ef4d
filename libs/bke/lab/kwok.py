"""kwok in a real-control-plane lab: one process per cluster keeps the lab's Nodes Ready and runs
the pods bound to them, in place of their kubelets (none can run on this machine).

Why one per lab and with the cluster's break-glass credential (super-admin.conf, system:masters):
kwok lists every Node it manages before it starts, which no node identity may do (the Node
authorizer lets a node read its own Node only); and it must be watching before the addons phase
creates the DaemonSets' pods. admin.conf is authorized only by the RBAC binding that phase
applies, so kwok started with it after the pods existed, and kwok 0.8 then played the stages of
some of those pods and left the others Pending for good (seen: one of five, the install waiting
out its progress deadline). super-admin.conf needs no binding: kwok watches from the moment the
first apiserver answers. The Nodes themselves are registered by each node's kubelet stand-in with the node's
own kubelet.conf (bke_agent.kubelet.node_api), annotated `bke.bocloud.com/lab-kubelet: kwok`,
and kwok manages only the Nodes with that annotation. What kwok does to them is our stage file,
kwok_stages.yaml beside this module.

    python -m bke.lab.kwok --cluster C --out DIR   (BKE_REDIS_URL: an admin URL; BKE_KEY_FILE_API)

waits until the certs service has written the cluster's admin kubeconfig
(bke.adapters.pki.api_credentials), writes it 0600 under DIR, then runs kwok and starts it again when it
exits, as systemd restarts a kubelet (kwok gives up when the apiserver does not answer for a
while, which is how an install starts: the credentials exist before any apiserver). SIGTERM
stops kwok, then this process.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bke.core.errors import TemporaryError
from bke.adapters.pki.api_credentials import read_api_credential
from bke.adapters.runtime.processes import free_port
from bke.core.secrets import SecretBox, box_for
from bke.adapters.state.client import redis_client
from .kube_binaries import KWOK_VERSION, locate
from .node_object import KWOK_ANNOTATION

__all__ = ["KWOK_ANNOTATION", "STAGES", "kwok_argv", "main", "wait_admin_kubeconfig"]

STAGES = Path(__file__).resolve().parent / "kwok_stages.yaml"
NODE_LEASE_S = 40  # the kubelet's default nodeLeaseDurationSeconds
# A scale run may stretch the lease (kwok renews it at a quarter of its duration, as a kubelet
# does): what 10,000 nodes' renewals cost is then measured apart from the rest.
LEASE_ENV = "BKE_LAB_KWOK_LEASE_S"


def kwok_argv(kwok: Path, kubeconfig: Path, port: int) -> list[str]:
    return [str(kwok), f"--kubeconfig={kubeconfig}", "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}", f"--config={STAGES}",
            f"--node-lease-duration-seconds={os.environ.get(LEASE_ENV) or NODE_LEASE_S}",
            f"--server-address=127.0.0.1:{port}"]


async def wait_admin_kubeconfig(redis_url: str, cluster: str, box: SecretBox, timeout_s: float) -> bytes:
    """The cluster's super-admin kubeconfig once the certs service has written it (it does during the
    install's certs phase); TemporaryError after `timeout_s`. `redis_url`: a user that may read
    `bke:<c>:api-credentials` (the lab's admin)."""
    redis = redis_client(redis_url)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return await read_api_credential(redis, cluster, "super-admin", box)
            except TemporaryError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)  # polling under a deadline: the install issues it
    finally:
        await redis.aclose()


async def _admin_kubeconfig(cluster: str, out: Path, timeout_s: float) -> Path:
    conf = await wait_admin_kubeconfig(os.environ["BKE_REDIS_URL"], cluster, box_for("api"), timeout_s)
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = out / f"{cluster}-super-admin.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(conf)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bke.lab.kwok")
    ap.add_argument("--cluster", required=True)
    ap.add_argument("--out", required=True, type=Path, help="where the admin kubeconfig is written (0600)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the cluster's credentials")
    args = ap.parse_args(argv)
    kwok = locate("kwok", KWOK_VERSION)
    if kwok is None:
        print(f"ERROR kwok {KWOK_VERSION} is not built: run `python3 dev.py kube`", file=sys.stderr)
        return 2
    kubeconfig = asyncio.run(_admin_kubeconfig(args.cluster, args.out, args.timeout))
    argv_ = kwok_argv(kwok, kubeconfig, free_port())
    print(f"kwok for cluster {args.cluster}: {' '.join(argv_)}", flush=True)
    return _keep_running(argv_)


def _keep_running(argv: list[str]) -> int:
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_term(_sig: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.terminate()

    signal.signal(signal.SIGTERM, on_term)
    backoff = 1.0
    while not stopping:
        started = time.monotonic()
        child = subprocess.Popen(argv)
        code = child.wait()
        if stopping:
            break
        backoff = 1.0 if time.monotonic() - started > 60 else min(backoff * 2, 30.0)
        print(f"kwok exited with {code}; starting it again in {backoff:.0f}s", flush=True)
        time.sleep(backoff)  # a restart back-off, as the kubelet's unit has (RestartSec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
