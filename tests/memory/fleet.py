"""The memory tier's agents: the real agent loop (bke_agent.loop.AgentLoop) over the in-memory bus,
with the bench's NullBackend for its steps, except:

- a step a `Fault` names fails, as a backend fails (StepError), a chosen number of times;
- an `etcd_snapshot` step is the agent's own (bke_agent.backends.snapshot.SnapshotTaker: the
  record, its MAC with the agent's key, the sealing to the deployment's snapshot key, the
  object's chunks and meta published as an agent publishes them) over a stand-in for etcd's gRPC
  gateway that answers a small database with etcd's trailing sha256. A restore then finds a
  snapshot that the upgrader checks as it checks a real one.
"""
from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bke.contracts.agent_steps import EtcdSnapshot, Step
from bke_agent.backends.base import Content, StepOutcome
from bke_agent.backends.null import NullBackend
from bke_agent.backends.snapshot import SnapshotTaker
from bke_agent.errors import StepError

__all__ = ["ETCD_DB", "Fault", "FaultyBackend"]

ETCD_DB = bytes(range(256)) * 4  # what the stand-in etcd serves: 1 KiB (a whole number of 512-byte pages)


@dataclass
class Fault:
    """Fail the steps of `step_type` on `node` (whose fields, when `match` is given, contain it) `times` times."""

    node: str
    step_type: str
    match: str = ""
    times: int = 1
    message: str = "injected failure"


def _etcd_gateway(request: httpx.Request) -> httpx.Response:
    """etcd's gateway, the two calls a snapshot makes (bke.adapters.etcdsnap.etcd_stream reads them)."""
    if request.url.path.endswith("/maintenance/status"):
        return httpx.Response(200, json={"header": {"revision": "42"}, "version": "3.5.21", "dbSize": str(len(ETCD_DB))})
    blob = base64.b64encode(ETCD_DB + hashlib.sha256(ETCD_DB).digest()).decode()
    return httpx.Response(200, content=json.dumps({"result": {"blob": blob}}).encode() + b"\n")


@dataclass
class FaultyBackend(NullBackend):
    node: str = ""
    faults: list[Fault] = field(default_factory=list)
    snapshots: SnapshotTaker | None = None  # set once the agent's identity is known

    def __post_init__(self) -> None:
        NullBackend.__init__(self)

    def take_snapshots(self, js: Any, scratch: Path, cluster: str, identity: Any) -> None:
        self.snapshots = SnapshotTaker(js, scratch, cluster, self.node, identity,
                                       http_transport=httpx.MockTransport(_etcd_gateway))

    async def execute(self, step: Step, content: Content) -> StepOutcome:
        for f in self.faults:
            if f.node == self.node and f.times > 0 and step.type == f.step_type and f.match in step.model_dump_json():
                f.times -= 1
                raise StepError(f.message, exit_code=1, stderr=f.message)
        if isinstance(step, EtcdSnapshot) and self.snapshots is not None:
            self.steps_run += 1
            return await self.snapshots.take(step, step.endpoint, False)
        return await super().execute(step, content)
