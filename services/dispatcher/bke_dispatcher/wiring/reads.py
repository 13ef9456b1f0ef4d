"""What others read from the dispatcher: /metrics, the dashboard, the cluster status every client
asks for (`bke.v1.status.get`), and the public half of the command key (an agent is provisioned
with it). The two requests are answered by bke.adapters.bus.responder (app.py registers them);
while the state is lost, the status and the dashboard answer Unavailable."""
from __future__ import annotations

from collections.abc import Awaitable, Callable

from bke.adapters.state.command_signing import CommandSigning
from bke.adapters.state.epoch import EpochWatch
from bke.contracts.agent import CommandKey

from ..dashboard import DashboardReader, dashboard_routes
from ..metrics import watch_metrics
from ..ops.rotation.run import RotationStore
from ..status import StatusReader, StatusResponder
from .basics import Basics

__all__ = ["COMMAND_KEY_QUEUE", "command_key_answer", "wire_reads"]

COMMAND_KEY_QUEUE = "dispatcher-command-key"


def wire_reads(b: Basics, epoch: EpochWatch) -> StatusResponder:
    """/metrics and the dashboard registered; the responder of the status request returned."""
    watch_metrics(b.svc, b.redis, b.plans)  # /metrics: installs, phases, nodes, commands in flight
    reader = StatusReader(b.redis, b.plans, rotation=RotationStore(b.redis).rotation_view)
    b.svc.http_routes.extend(dashboard_routes(DashboardReader(reader, b.state, b.plans, b.events, b.now,
                                                              guard=epoch.ensure_intact)))
    return StatusResponder(reader, guard=epoch.ensure_intact)


def command_key_answer(signing: CommandSigning) -> Callable[[str, bytes], Awaitable[bytes]]:
    """The answer to `bke.v1.agents.command-key`, whatever was asked: the public half only."""

    async def answer(subject: str, body: bytes) -> bytes:
        signer = await signing.signer()
        return CommandKey(public_line=signer.verify_key.public_line, key_id=signer.key_id).to_bytes()

    return answer
