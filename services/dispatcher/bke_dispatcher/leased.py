"""What the dispatcher's operations beside the install share (certificate rotation, reset): an
agent's answer is recorded, then the operation's loop is woken; a pass runs under the
operation's lease, so that of several dispatcher replicas one moves a cluster's operation on."""
from __future__ import annotations

from typing import Any, Callable

from bke.contracts.agent import CommandResult
from bke.adapters.runner import Outcome

__all__ = ["LeasedOperation"]


class LeasedOperation:
    """Mixed into an operation with `store.record_result`, `state.claim/release`, `owner`,
    `lease_ms`, `kick` and its own `_reconcile`; `LEASE` names its lease."""

    LEASE: str
    store: Any
    state: Any
    owner: str
    lease_ms: int
    kick: Callable[[str], None]

    async def on_result(self, res: CommandResult) -> None:
        failed = next((s for s in res.steps if s.status == "Failed"), None)
        step = failed.id if failed else ""
        stderr = (failed.stderr or failed.stdout) if failed else ""
        await self.store.record_result(res, step, stderr)
        self.kick(res.cluster)

    async def reconcile(self, cluster: str) -> Outcome:
        if not await self.state.claim(cluster, self.LEASE, self.owner, self.lease_ms):
            return Outcome("wait", delay=1.0, reason=f"another dispatcher holds the {self.LEASE} lease")
        try:
            return await self._reconcile(cluster)
        finally:
            await self.state.release(cluster, self.LEASE, self.owner)

    async def _reconcile(self, cluster: str) -> Outcome:
        raise NotImplementedError
