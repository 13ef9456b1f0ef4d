"""Inputs from the agents: command results, registrations, retry requests.

Each handler only records what happened and wakes the cluster's reconcile loop; the loop
decides what to do next. All of them are safe under redelivery.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Awaitable, Callable

from pydantic import ValidationError

from bke.contracts.agent import AgentRegistered, CommandResult
from bke.contracts.install import NodeStepChanged, RetryRequested, install_subject
from bke.errors import MalformedMessage, TemporaryError

from .engine import parse_command_id
from .phases import PHASES
from .rotation import is_rotation_command
from .state import DispatcherState

__all__ = ["Inputs"]

log = logging.getLogger("bke.dispatcher")
STDERR_KEEP = 2000


class Inputs:
    def __init__(
        self,
        state: DispatcherState,
        publish: Callable[[bytes, str, dict[str, str]], Awaitable[None]],
        kick: Callable[[str], None],
        now: Callable[[], datetime],
        on_health: Callable[[CommandResult], Awaitable[None]],
        notify: Callable[[bytes, str, dict[str, str]], Awaitable[None]] | None = None,
        on_rotation: Callable[[CommandResult], Awaitable[None]] | None = None,
    ):
        self.notify = notify or publish
        self.on_rotation = on_rotation  # certificate rotations' results (see rotations.py)
        self.state, self.publish, self.kick, self.now, self.on_health = state, publish, kick, now, on_health
        self._request_ids: dict[str, str] = {}  # cluster -> request id, read once (it never changes)

    async def _request_id(self, cluster: str) -> str:
        rid = self._request_ids.get(cluster)
        if rid is None:
            rid = (await self.state.install(cluster)).get("requestId", "")
            if rid:
                self._request_ids[cluster] = rid
        return rid

    async def result(self, body: bytes) -> None:
        try:
            res = CommandResult.model_validate_json(body)
            cluster, slug, node, gen = parse_command_id(res.command_id)
        except (ValidationError, ValueError) as exc:
            raise MalformedMessage(f"malformed command result: {exc}") from exc
        if slug.startswith("health@"):
            await self.on_health(res)
            return
        if is_rotation_command(slug) and self.on_rotation is not None:
            await self.on_rotation(res)
            return
        failed_step = next((s for s in res.steps if s.status == "Failed"), None)
        step = failed_step.id if failed_step else ""
        stderr = (failed_step.stderr or failed_step.stdout)[-STDERR_KEEP:] if failed_step else ""
        now = self.now().isoformat()
        counted = await self.state.finish_command(cluster, slug, node, res.command_id, gen, res.status, step, stderr, now)
        if counted < 0:
            # never drop it: the dispatcher that resumes records the command, then this counts
            raise TemporaryError(f"result of {res.command_id} before its command was recorded", delay=1.0)
        if counted:
            ev = NodeStepChanged(
                request_id=await self._request_id(cluster), cluster=cluster, node=node, phase=slug,
                status=res.status, at=now, step=step or None, stderr=stderr,
            )
            await self.notify(ev.to_bytes(), install_subject(cluster, "node"), {})
            if res.status == "Failed":
                log.warning("node step failed", extra={"cluster": cluster, "node": node, "phase": slug, "step": step})
        self.kick(cluster)

    async def registered(self, body: bytes) -> None:
        try:
            reg = AgentRegistered.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed registration: {exc}") from exc
        await self.state.register_agent(reg.cluster, reg.node, reg.model_dump_json(by_alias=True))
        self.kick(reg.cluster)

    async def retry(self, body: bytes) -> None:
        try:
            req = RetryRequested.model_validate_json(body)
        except ValidationError as exc:
            raise MalformedMessage(f"malformed retry request: {exc}") from exc
        c = req.cluster
        failed_phase = None
        for phase in PHASES:
            if (await self.state.phase(c, phase.slug)).get("status") == "Failed":
                failed_phase = phase.slug
                break
        if failed_phase is None:
            log.info("retry: nothing failed", extra={"cluster": c, "request_id": req.request_id})
            return
        cmds = await self.state.all_commands(c, failed_phase)
        chosen = {h: cmd for h, cmd in cmds.items() if cmd["status"] == "Failed" and (not req.nodes or h in req.nodes)}
        for cmd in chosen.values():
            cmd.update(status="Retry", gen=cmd["gen"] + 1)
        await self.state.retry_nodes(c, failed_phase, chosen)
        log.info("retry", extra={"cluster": c, "phase": failed_phase, "nodes": sorted(chosen)})
        self.kick(c)
