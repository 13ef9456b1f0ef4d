"""Inputs from the agents: command results, registrations, retry requests (which ask the
renderer or certs service again when the failure was theirs).

Each handler takes its typed message (bke.bus.handler), records what happened, wakes the
cluster's reconcile loop and returns what to publish; the loop decides what to do next. All of
them are safe under redelivery.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Awaitable, Callable

from bke.bus.handler import Out
from bke.contracts.agent import AgentRegistered, CommandResult
from bke.contracts.install import NodeStepChanged, RetryInstall, install_subject
from bke.contracts.certs import ISSUE_CERTS, IssueCerts
from bke.contracts.render import RENDER_MANIFESTS, RenderManifests
from bke.errors import MalformedMessage, NotYetKnown

from .engine import parse_command_id
from .phases import PHASES
from .readiness import INPUT_SERVICE, InputStatus
from .rotation import is_rotation_command
from .state import DispatcherState

__all__ = ["Inputs"]

log = logging.getLogger("bke.dispatcher")
STDERR_KEEP = 2000


class Inputs:
    def __init__(
        self,
        state: DispatcherState,
        kick: Callable[[str], None],
        now: Callable[[], datetime],
        on_health: Callable[[CommandResult], Awaitable[None]],
        on_rotation: Callable[[CommandResult], Awaitable[None]] | None = None,
    ):
        self.on_rotation = on_rotation  # certificate rotations' results (see rotations.py)
        self.state, self.kick, self.now, self.on_health = state, kick, now, on_health
        self._request_ids: dict[str, str] = {}  # cluster -> request id, read once (it never changes)

    async def _request_id(self, cluster: str) -> str:
        rid = self._request_ids.get(cluster)
        if rid is None:
            rid = (await self.state.install(cluster)).get("requestId", "")
            if rid:
                self._request_ids[cluster] = rid
        return rid

    async def result(self, res: CommandResult) -> list[Out]:
        try:
            cluster, slug, node, gen = parse_command_id(res.command_id)
        except ValueError as exc:
            raise MalformedMessage(f"malformed command result: command id {res.command_id!r}: {exc}") from exc
        if slug.startswith("health@"):
            await self.on_health(res)
            return []
        if is_rotation_command(slug) and self.on_rotation is not None:
            await self.on_rotation(res)
            return []
        failed_step = next((s for s in res.steps if s.status == "Failed"), None)
        step = failed_step.id if failed_step else ""
        stderr = (failed_step.stderr or failed_step.stdout)[-STDERR_KEEP:] if failed_step else ""
        now = self.now().isoformat()
        counted = await self.state.finish_command(cluster, slug, node, res.command_id, gen, res.status, step, stderr, now)
        if counted < 0:
            # the dispatcher that resumes records the command, then this counts; a command or
            # generation never recorded is dead-lettered after NotYetKnown's bound
            raise NotYetKnown(f"result of {res.command_id} before its command was recorded", delay=1.0)
        self.kick(cluster)
        if not counted:
            return []
        if res.status == "Failed":
            log.warning("node step failed", extra={"cluster": cluster, "node": node, "phase": slug, "step": step})
        ev = NodeStepChanged(
            request_id=await self._request_id(cluster), cluster=cluster, node=node, phase=slug,
            status=res.status, at=now, step=step or None, stderr=stderr,
        )
        return [Out(ev, install_subject(cluster, "node"), live=True)]

    async def registered(self, reg: AgentRegistered) -> None:
        await self.state.register_agent(reg.cluster, reg.node, reg.model_dump_json(by_alias=True))
        self.kick(reg.cluster)

    async def retry(self, req: RetryInstall) -> list[Out]:
        c = req.cluster
        failed_phase = None
        for phase in PHASES:
            if (await self.state.phase(c, phase.slug)).get("status") == "Failed":
                failed_phase = phase.slug
                break
        if failed_phase is None:
            log.info("retry: nothing failed", extra={"cluster": c, "request_id": req.request_id})
            return []
        cmds = await self.state.all_commands(c, failed_phase)
        chosen = {h: cmd for h, cmd in cmds.items() if cmd["status"] == "Failed" and (not req.nodes or h in req.nodes)}
        for cmd in chosen.values():
            cmd.update(status="Retry", gen=cmd["gen"] + 1)
        # A service's failure is asked of that service again: its record first (so that its new
        # answer is never overwritten), then the install back to Running, then the command.
        asked = []
        for name, doc in (await self.state.inputs(c)).items():
            if doc.get("status") == InputStatus.FAILED.value:
                await self.state.set_input(c, name, {**doc, "status": InputStatus.REQUESTED.value, "reason": ""})
                asked.append(name)
        await self.state.retry_nodes(c, failed_phase, chosen)
        log.info("retry", extra={"cluster": c, "phase": failed_phase, "nodes": sorted(chosen), "asked": asked})
        self.kick(c)
        # one command per service ("certs" and "seal" both ask the certs service)
        return [_ask_again(service, req) for service in dict.fromkeys(INPUT_SERVICE[n] for n in asked)]


def _ask_again(service: str, req: RetryInstall) -> Out:
    """The command that asks a service (of readiness.INPUT_SERVICE) to do its work again."""
    msg_id = f"retry:{req.request_id}:{service}"
    if service == "renderer":
        return Out(RenderManifests(request_id=req.request_id, cluster=req.cluster), RENDER_MANIFESTS, msg_id)
    return Out(IssueCerts(request_id=req.request_id, cluster=req.cluster), ISSUE_CERTS, msg_id)
