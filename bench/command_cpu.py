#!/usr/bin/env python3
"""Process CPU per upgrade command, without the bus: what bench/upgrade.py's totals are made of.
A script, not a test.

    .venv/bin/python bench/command_cpu.py [--commands 1500]

Two figures for a worker-like command of the upgrade's `workers` step (one ReplaceFiles of
five 400-byte node files inline and three binaries by URL, 4.7 KB on the wire):

* ``sign+serialise``: the upgrader's part of sending it (the command signed and its body
  written: bke.core.secrets.signing.signed_command_bytes);
* ``agent handling``: one real `AgentLoop` per node taking that body (form check, parse,
  signature and freshness checks, NullBackend steps, journal, result, ack) with the NATS
  client replaced by a recorder, so the figure holds no socket or server time.

Why: on a shared 2-core machine the upgrade benchmark's wall time and per-process CPU vary
by tens of percent between runs; this isolates the per-command code paths it exercises 15,000
times at 5,000 nodes. Run it against two revisions (PYTHONPATH to the other one's `libs` and
`agent`) to compare them.
"""
from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import random
import time
from datetime import datetime, timezone
from typing import Any

from record import add_json_option, save  # bench/record.py (this script's folder is on sys.path)

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import HealthProbe, NewFile, ReplaceFiles
from bke.core.secrets import signing
from bke_agent import AgentIdentity, AgentLoop, AgentSettings, MemoryJournal, NullBackend
from bke_agent.verify import CommandVerifier

NOW = datetime(2026, 12, 2, 1, 30, tzinfo=timezone.utc)


class _Msg:
    """A delivered command as the loop sees it: its body and the acks it sends."""

    headers = None

    def __init__(self, data: bytes) -> None:
        self.data = data

    async def ack_sync(self, timeout: float = 1.0) -> None:
        return None

    async def nak(self, delay: float | None = None) -> None:
        raise AssertionError("a valid command was handed back")

    async def term(self) -> None:
        raise AssertionError("a valid command was refused")

    async def in_progress(self) -> None:
        return None


class _JetStream:
    async def publish(self, subject: str, payload: bytes, **kw: Any) -> None:
        return None


def _command(i: int, rnd: random.Random) -> AgentCommand:
    files = []
    for j in range(5):
        content = rnd.randbytes(400)
        files.append(NewFile(path=f"/etc/containerd/file{j}", content_b64=base64.b64encode(content).decode(),
                             sha256=hashlib.sha256(content).hexdigest()))
    files += [NewFile(path=f"/opt/cni/bin/bin{j}", mode=0o755, url=f"http://repo/bin{j}-1.34.1", sha256="a" * 64)
              for j in range(3)]
    step = ReplaceFiles(id="replace:runtime", files=files, restart_units=["containerd.service", "kubelet.service"],
                        probes=[HealthProbe(url="http://127.0.0.1:10248/healthz")], timeout_s=300.0)
    return AgentCommand(command_id=f"bench/upgrade@r@workers/n{i}/0", cluster="bench", node=f"n{i}",
                        phase="upgrade:workers", issued_at=NOW.isoformat(), steps=[step], issuer="upgrader")


async def _agents(signer: signing.CommandSigner, cmds: list[AgentCommand], bodies: list[bytes]) -> float:
    loops = [AgentLoop(None, _JetStream(), AgentSettings(cluster="bench", node=c.node, heartbeat_s=0),  # type: ignore[arg-type]
                       NullBackend(), MemoryJournal(), AgentIdentity.ephemeral(),
                       verifier=CommandVerifier(signer.verify_key, "bench", c.node), now=lambda: NOW) for c in cmds]
    t0 = time.process_time()
    for loop, body in zip(loops, bodies):
        await loop._on_msg(_Msg(body))  # type: ignore[arg-type]
    spent = time.process_time() - t0
    assert sum(loop.executed for loop in loops) == len(cmds)
    return spent


def main(n: int) -> dict[str, str]:
    signer = signing.CommandSigner.generate()
    cmds = [_command(i, random.Random(i)) for i in range(n)]
    # a revision before signed_command_bytes sent the signed model's own body
    write = getattr(signing, "signed_command_bytes", None) or (lambda c, s: signing.sign_command(c, s).to_bytes())
    t0 = time.process_time()
    bodies = [write(c, signer) for c in cmds]
    send = time.process_time() - t0
    handle = asyncio.run(_agents(signer, cmds, bodies))
    print(f"{n} commands of {len(bodies[0])} B: upgrader sign+serialise {send / n * 1e6:6.1f} us, "
          f"agent handling {handle / n * 1e6:6.1f} us (process CPU per command)")
    return {"commands": str(n), "bytes": str(len(bodies[0])), "upgrader sign+serialise": f"{send / n * 1e6:.1f} us",
            "agent handling": f"{handle / n * 1e6:.1f} us"}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commands", type=int, default=1500)
    add_json_option(ap)
    args = ap.parse_args()
    save(args.json, "command_cpu", [main(args.commands)])
