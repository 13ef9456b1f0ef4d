"""Run the bootstrap table on nodes: each node's steps in order, many nodes at once, bounded.

Why this shape: a node's steps stop at the first failure (like ``set -e``) and the outcome says
which step and why; nodes are independent, so one node's failure never stops the others, and a
semaphore keeps the number of open SSH connections at ``concurrency``. Every step is idempotent
(``mkdir -p``, ``install``, ``pip install``, ``systemctl restart``), so running the command again
after fixing a node simply finishes the job.

The session is reached through :class:`RemoteSession` and an ``open_session`` callable, so this
module has no SSH code and the outcomes are plain values for the CLI to print.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from bke.core.errors import BKEError
from .errors import (
    HostKeyRefused,
    SshAuthRefused,
    SshUnreachable,
    StepFailed,
    UploadFailed,
)
from .plan import Inline, LocalFile, Step, Upload, remote_command

__all__ = ["NodeOutcome", "RemoteSession", "bootstrap_node", "bootstrap_nodes", "describe_steps", "steps_markdown"]

log = logging.getLogger(__name__)
# (node, the public line `bke-agent init` printed) -> "" if recorded, else why not
OnPublicKey = Callable[[str, str], Awaitable[str]]

Status = Literal["ok", "failed", "refused", "unreachable"]


class RunResultLike(Protocol):
    @property
    def exit_status(self) -> int | None: ...

    @property
    def stdout(self) -> str: ...

    @property
    def stderr(self) -> str: ...


class RemoteSession(Protocol):
    async def run(self, command: str, timeout_s: float) -> RunResultLike: ...

    async def upload(self, data: bytes, remote_path: str, mode: int) -> None: ...


@dataclass(frozen=True)
class NodeOutcome:
    node: str
    address: str
    status: Status
    step: str | None = None  # the step that failed, or None
    message: str = ""
    public_key: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


async def bootstrap_node(
    session: RemoteSession, steps: Sequence[Step], node: str, address: str, cluster: str = "",
    on_public_key: OnPublicKey | None = None,
) -> NodeOutcome:
    """Run ``steps`` in order on one connected node; stop at the first failure. ``on_public_key``
    records the agent's key (the provisioning channel) as soon as the node prints it, before the
    steps after it (the agent's start); its error message fails the node at step "provision"."""
    public_key: str | None = None
    extra = {"cluster": cluster, "node": node, "operation": "agent-bootstrap"}
    for step in steps:
        try:
            stdout = await _run_step(session, step)
        except (StepFailed, UploadFailed) as exc:
            log.warning("bootstrap step failed", extra={**extra, "step": step.name})
            return NodeOutcome(node, address, "failed", step.name, str(exc))
        except SshUnreachable as exc:  # the connection dropped in the middle
            return NodeOutcome(node, address, "unreachable", step.name, str(exc))
        if step.reports_public_key:
            public_key = stdout.strip()
            if not public_key:
                return NodeOutcome(node, address, "failed", step.name, "bke-agent init printed no public key")
            if on_public_key is not None and (why := await on_public_key(node, public_key)):
                return NodeOutcome(node, address, "failed", "provision", why)
        log.info("bootstrap step done", extra={**extra, "step": step.name})
    return NodeOutcome(node, address, "ok", None, "agent running", public_key)


async def _run_step(session: RemoteSession, step: Step) -> str:
    """The command, then its uploads; returns the command's stdout."""
    result = await session.run(remote_command(step.argv), step.timeout_s)
    if result.exit_status != 0:
        raise StepFailed(step.name, result.exit_status, result.stderr)
    for upload in step.uploads:
        await session.upload(_read(upload), upload.remote_path, upload.mode)
    return result.stdout


def _read(upload: Upload) -> bytes:
    if isinstance(upload.source, LocalFile):
        return upload.source.path.read_bytes()
    return upload.source.text.encode()


OpenSession = Callable[[str], AbstractAsyncContextManager[RemoteSession]]


async def bootstrap_nodes(
    nodes: Sequence[tuple[str, str]],
    steps_for: Callable[[str], Sequence[Step]],
    open_session: OpenSession,
    concurrency: int = 20,
    cluster: str = "",
    on_public_key: OnPublicKey | None = None,
) -> list[NodeOutcome]:
    """Bootstrap ``nodes`` (name, address) with at most ``concurrency`` connections; input order kept."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    gate = asyncio.Semaphore(concurrency)

    async def one(node: str, address: str) -> NodeOutcome:
        async with gate:
            try:
                async with open_session(node) as session:
                    return await bootstrap_node(session, steps_for(node), node, address, cluster, on_public_key)
            except HostKeyRefused as exc:
                return NodeOutcome(node, address, "refused", "connect", str(exc))
            except SshAuthRefused as exc:
                return NodeOutcome(node, address, "refused", "authenticate", str(exc))
            except BKEError as exc:  # SshUnreachable and the rest of the classified errors
                return NodeOutcome(node, address, "unreachable", "connect", str(exc))
            except OSError as exc:  # a local file (wheel, requirements) vanished mid-run
                return NodeOutcome(node, address, "failed", None, f"{type(exc).__name__}: {exc.strerror or exc}")

    return list(await asyncio.gather(*(one(n, a) for n, a in nodes)))


def describe_steps(steps: Sequence[Step]) -> list[str]:
    """The dry-run text: each command exactly as sent, each upload with its mode and origin."""
    lines: list[str] = []
    for step in steps:
        lines.append(f"[{step.name}] {remote_command(step.argv)}")
        for u in step.uploads:
            lines.append(f"    upload {u.remote_path} (mode {u.mode:04o}) {_origin(u)}")
    return lines


def _origin(upload: Upload) -> str:
    if isinstance(upload.source, LocalFile):
        return f"from {Path(upload.source.path)}"
    assert isinstance(upload.source, Inline)
    if upload.source.secret:
        return f"generated, {len(upload.source.text.splitlines())} lines (not shown: holds the NATS URL)"
    return "generated:\n" + "\n".join(f"      | {line}" for line in upload.source.text.splitlines())


def steps_markdown(steps: Sequence[Step]) -> str:
    """The table in docs/agent-bootstrap.md, generated from the same steps (a test keeps them equal)."""
    rows = ["| # | step | what | as root | command | uploads |", "|---|---|---|---|---|---|"]
    for i, step in enumerate(steps, 1):
        uploads = ", ".join(f"`{u.name}` ({u.mode:04o})" for u in step.uploads)
        command = remote_command(step.argv).replace("|", "\\|")
        root = "yes" if step.privileged else "no"
        rows.append(f"| {i} | `{step.name}` | {step.summary} | {root} | `{command}` | {uploads} |")
    return "\n".join(rows) + "\n"
