"""The install's record in Redis (its keys: `state.DispatcherState`), for the one loop: read in
one round trip, its wait notes and its end written back.

An end is written by compare-and-set (`DispatcherState.finish_install`: only the Running install
of its request id ends, and its operation slot goes in the same step), then the failed phase's
status: whoever reads the phase Failed reads the install Failed too. A record that another
writer ended first (a refusal, `Installs.refuse`) is not ended twice: its end is theirs to announce.
"""
from __future__ import annotations

import json
from typing import Any

from bke.adapters.operation import RecordStore
from bke.adapters.state.keys.dispatcher import inputs_key, install_key, installs_index, phase_key
from bke.contracts.statuses import OperationStatus, PhaseStatus
from bke.core.state.schema import SCHEMA_FIELD, check_readable

from ...decide import PhaseRecord
from ...phases import PHASES
from ...readiness import InputRecord
from ...state import DispatcherState
from .record import InstallRecord

__all__ = ["InstallStore"]

END_SENT = "endSent"  # "0" from its end until `install finished` went out, then "1"


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else v


def _unreadable(raw: str | bytes) -> InstallRecord:
    raise TypeError("the install record is read as hashes (InstallStore.load)")


class InstallStore(RecordStore[InstallRecord]):
    def __init__(self, state: DispatcherState):
        # the install's answers are counted into its phases as they arrive (results.py): no
        # results hash of the loop's is kept (`results_key` names none that is ever written)
        super().__init__(state.r, _unreadable, install_key, lambda c: f"{install_key(c)}:unused", installs_index())
        self.state = state

    async def load(self, cluster: str) -> InstallRecord | None:
        async with self.state.r.pipeline(transaction=False) as pipe:
            pipe.hgetall(install_key(cluster))
            pipe.hgetall(inputs_key(cluster))
            for phase in PHASES:
                pipe.hgetall(phase_key(cluster, phase.slug))
            raw, said, *phases = await pipe.execute()
        inst = {_s(k): _s(v) for k, v in raw.items()}
        if not inst:
            return None
        check_readable("install", inst.get(SCHEMA_FIELD), f"the install record of {cluster}")
        inputs = {_s(k): InputRecord.from_doc(json.loads(v)) for k, v in said.items()}
        return InstallRecord(
            request_id=inst.get("requestId", ""), cluster=cluster, started_at=inst.get("startedAt", ""),
            status=OperationStatus(inst.get("status") or OperationStatus.RUNNING), finished_at=inst.get("finishedAt", ""),
            message=inst.get("message", ""), plan_digest=inst.get("planDigest", ""),
            nodes_changed=inst.get("nodesChanged") == "1", announced=inst.get(END_SENT, "1") == "1",
            failed_phase=inst.get("phase", "") if inst.get("status") == OperationStatus.FAILED else "",
            failed_node=inst.get("node", ""), kind=inst.get("kind", "") if inst.get("status") == OperationStatus.FAILED else "",
            phases={p.slug: PhaseRecord.from_hash({_s(k): _s(v) for k, v in h.items()}) for p, h in zip(PHASES, phases)},
            inputs=inputs)

    async def save(self, rec: InstallRecord) -> bool:
        if rec.running:  # what a wait noted of its phase (the carriers wrote everything else)
            current = rec.current(PHASES)
            if rec.noted and current is not None:
                await self.state.set_phase(rec.cluster, current.slug, **rec.noted)
            rec.noted = {}
            return True
        if not rec.end_pending:  # its end was written: now it went out
            await self.state.set_install(rec.cluster, **{END_SENT: "1"})
            return True
        rec.end_pending = False
        fields = {"status": rec.status, "finishedAt": rec.finished_at, "message": rec.message, "phase": rec.failed_phase,
                  "node": rec.failed_node, "kind": rec.kind, END_SENT: "0"}
        if not await self.state.finish_install(rec.cluster, rec.request_id, **fields):
            rec.announced = True  # another writer ended it first, and announces it
            return False
        if rec.failed_phase:
            await self.state.set_phase(rec.cluster, rec.failed_phase, status=PhaseStatus.FAILED,
                                       finishedAt=rec.finished_at, message=rec.message)
        return True

    async def clusters(self) -> list[str]:
        return await self.state.installs()
