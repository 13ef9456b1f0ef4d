"""Run one command's steps in order: per-step timeout, retries with backoff, truncated output,
stop at the first failed step.

Why here and not in the backends: these rules are the contract with the dispatcher and must
not differ between a real host and the lab. A backend only makes a step happen.

`timeout_s` bounds each attempt (a `ReplaceFiles` attempt: its probes, its rollback's probes
and `REPLACE_GRACE_S` for downloads and restarts; see backends/replace.py); a step is tried
`retries + 1` times, `backoff_s * 2^(n-1)` apart (capped at 300 s), unless its error is permanent.

Result shape: `steps` lists the steps that were attempted, in order; when a step fails, it is
the last entry and the steps after it are not listed (they did not run). A WriteFile whose
file already has the bytes and mode is `Skipped` (and counts as success).

Kubeconfigs: every file of a command is opened and checked before any step runs (agent loop,
contents.py: no exec plugin, no auth provider; bke.core.host_actions.kubeconfigs), and each
again once its step opens it to write it (a step that fails so fails permanently). The rest of
what a command may do is checked on the whole command before it runs (agent loop,
bke.core.host_actions.check).

Secrets: sealed content is kept open only inside the step that writes it (the check before the
run drops it at once), and no log line or error message ever carries file content (an
unexpected error of a WriteFile step is reported by type and errno text only).
"""
from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from bke.contracts.agent import AgentCommand, CommandResult, OUTPUT_LIMIT, StepResult
from bke.contracts.agent_steps import (
    EtcdMemberAdd,
    EtcdMemberPromote,
    EtcdMemberRemove,
    ReplaceFiles,
    Step,
    TrustCommandKey,
    UpdateAgent,
    WaitHealth,
    WriteFile,
)
from bke.contracts.statuses import FinishedStatus, StepResultStatus
from bke.core.host_actions import kubeconfig_refusal

from .backends.base import COMMAND_ID, Backend, StepOutcome
from .command_keys import AgentKeyring
from .contents import open_new_file, open_write
from .errors import PermanentStepError, StepError
from .identity import AgentIdentity
from .selfupdate import RestartRequested, SelfUpdater
from .version import RUNNING_VERSION

__all__ = ["Executor", "clip", "utc_now"]

log = logging.getLogger("bke.agent.executor")
BACKOFF_CAP_S = 300.0
HEALTH_GRACE_S = 5.0  # WaitHealth reports its own last probe failure before the hard timeout
# The etcd membership steps report etcd's last refusal at their deadline: a last request may take this long
MEMBER_GRACE_S = 20.0
REPLACE_GRACE_S = 120.0  # a ReplaceFiles step's downloads, writes and unit restarts, besides its probes


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def clip(data: bytes | str, limit: int = OUTPUT_LIMIT) -> str:
    """The tail of `data` as text of at most `limit` UTF-8 bytes, marked when cut.

    The tail, because the end of a program's output is where it says why it failed.
    """
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) <= limit:
        text = raw.decode(errors="replace")
        if len(text.encode()) <= limit:
            return text
    marker = f"[truncated {len(raw)} bytes to the last part]\n"
    keep = raw[-(limit - len(marker)):]
    while keep and (keep[0] & 0xC0) == 0x80:  # do not start in the middle of a character
        keep = keep[1:]
    text = keep.decode(errors="replace")
    while len((marker + text).encode()) > limit:  # replacement characters can grow the text
        text = text[1:]
    return marker + text


def _content_opener(step: WriteFile, identity: AgentIdentity) -> Callable[[], bytes]:
    def content() -> bytes:
        data = open_write(step, identity)
        _check_kubeconfig(step.path, data)
        return data

    return content


def _check_kubeconfig(path: str, data: bytes) -> None:
    """Refuse to write a kubeconfig-like file that names an exec plugin or an auth provider
    (bke.core.host_actions.kubeconfigs): checked on the clear bytes, before the write (again:
    the agent loop checked every file of the command before it ran, contents.py)."""
    why = kubeconfig_refusal(path, data)
    if why is not None:
        raise PermanentStepError(f"refused: {why}")


def _opened(step: ReplaceFiles, identity: AgentIdentity) -> ReplaceFiles:
    """The step with every sealed file opened into inline content, in memory only (a renewed
    key or kubeconfig of an upgrade: bke.core.upgrade.certificates). Errors name the path and key
    ids, never content; the clear bytes are checked against the file's sha256 here, and a
    kubeconfig-like file's against bke.core.host_actions.kubeconfigs."""
    files = []
    for f in step.files:
        if f.url is not None and f.sealed_b64 is None:
            files.append(f)
            continue
        data = open_new_file(f, identity)
        _check_kubeconfig(f.path, data)
        files.append(f if f.sealed_b64 is None else
                     f.model_copy(update={"sealed_b64": None, "content_b64": base64.b64encode(data).decode()}))
    return step.model_copy(update={"files": files})


def _unexpected(step: Step, exc: BaseException) -> str:
    """How an unexpected error is shown; a WriteFile's never includes the exception text."""
    if isinstance(step, WriteFile):
        if isinstance(exc, OSError):
            return f"{type(exc).__name__}: {exc.strerror or 'error'} ({step.path})"
        return f"{type(exc).__name__} while writing {step.path}"
    return f"{type(exc).__name__}: {exc}"


class Executor:
    """Runs commands for one agent. `now`, `sleep` and `clock` are injected for tests. `keys`:
    the keyring the agent verifies with, which a TrustCommandKey step changes (command_keys.py)."""

    def __init__(self, backend: Backend, identity: AgentIdentity, *,
                 now: Callable[[], datetime] = utc_now,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic, updater: SelfUpdater | None = None,
                 kernel: Callable[[], str] = lambda: os.uname().release, keys: AgentKeyring | None = None) -> None:
        self.backend, self.identity, self.updater, self.keys = backend, identity, updater, keys
        self.now, self.sleep, self.clock, self.kernel = now, sleep, clock, kernel

    async def _execute(self, step: Step, content: Callable[[], bytes], command: AgentCommand) -> StepOutcome:
        if isinstance(step, UpdateAgent):  # the agent itself, not the node: no backend does it
            if self.updater is None:
                raise PermanentStepError("this agent cannot update itself here (no launcher, or a test backend)")
            return await self.updater.update(step)
        if isinstance(step, TrustCommandKey):  # the agent's own trust, not the node's: no backend does it
            if self.keys is None:
                raise PermanentStepError("this agent holds no command keyring to change")
            return self.keys.trust(step, command, self.now())
        return await self.backend.execute(step, content)

    async def run(self, command: AgentCommand) -> CommandResult:
        started = self.now().isoformat()
        results: list[StepResult] = []
        for step in command.steps:
            res = await self.run_step(step, command)
            results.append(res)
            if res.status == StepResultStatus.FAILED:
                break
        failed = any(r.status == StepResultStatus.FAILED for r in results)
        return CommandResult(
            command_id=command.command_id, cluster=command.cluster, node=command.node,
            agent_id=self.identity.agent_id, status=FinishedStatus.FAILED if failed else FinishedStatus.SUCCEEDED,
            steps=results, started_at=started, finished_at=self.now().isoformat(), agent_version=RUNNING_VERSION,
            incarnation=command.incarnation,  # whose answer it is: a cluster made again reuses command ids
            operation=command.operation,  # whose operation: the dispatcher routes the answer by it
        )

    async def run_step(self, step: Step, command: AgentCommand) -> StepResult:
        token = COMMAND_ID.set(command.command_id)  # what a ReplaceFiles backup is named after
        try:
            return await self._run_step(step, command)
        finally:
            COMMAND_ID.reset(token)

    async def _run_step(self, step: Step, command: AgentCommand) -> StepResult:
        ids = {"cluster": command.cluster, "node": command.node, "command_id": command.command_id, "step": step.id}
        if step.kernel_below is not None:
            # a step for older kernels only: decided here, where the kernel is known (a lab node
            # shares the machine's kernel, so it decides by that one)
            newer, why = kernel_at_least(self.kernel(), step.kernel_below)
            if newer is None:
                return StepResult(id=step.id, status=StepResultStatus.FAILED, stderr=why)
            if newer:
                return StepResult(id=step.id, status=StepResultStatus.SKIPPED, stdout=why)
        content = _content_opener(step, self.identity) if isinstance(step, WriteFile) else _no_content
        limit = _hard_limit(step)
        attempts = step.retries + 1
        t0 = self.clock()
        error: StepError | None = None
        for attempt in range(1, attempts + 1):
            try:
                if isinstance(step, ReplaceFiles):
                    step = _opened(step, self.identity)
                async with asyncio.timeout(limit):  # no extra task per step (unlike wait_for)
                    out: StepOutcome = await self._execute(step, content, command)
            except StepError as exc:
                error = exc
            except RestartRequested:  # not a result: the command goes back unanswered
                raise
            except TimeoutError:
                shown = limit if isinstance(step, ReplaceFiles) else step.timeout_s  # its probes have their own
                error = StepError(f"step {step.id} timed out after {shown:g}s")
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure of a step is reported, not raised
                error = StepError(_unexpected(step, exc))
            else:
                return StepResult(id=step.id, status=out.status, exit_code=out.exit_code, stdout=clip(out.stdout),
                                  stderr=clip(out.stderr), attempts=attempt, duration_s=round(self.clock() - t0, 3))
            permanent = isinstance(error, PermanentStepError)
            log.warning("step attempt %d/%d failed%s", attempt, attempts, " (permanent)" if permanent else "",
                        extra={**ids, "exit_code": error.exit_code})
            if permanent or attempt == attempts:
                break
            await self.sleep(min(BACKOFF_CAP_S, step.backoff_s * 2 ** (attempt - 1)))
        assert error is not None
        return StepResult(id=step.id, status=StepResultStatus.FAILED, exit_code=error.exit_code, stdout=clip(error.stdout),
                          stderr=clip(error.stderr), attempts=attempt, duration_s=round(self.clock() - t0, 3))


def kernel_at_least(release: str, version: str) -> tuple[bool | None, str]:
    """Whether kernel `release` (`uname -r`, e.g. "3.10.0-1160.el7.x86_64") is `version`
    ("MAJOR.MINOR") or newer, and the sentence that says so; None when it cannot be read."""
    m = re.match(r"^(\d+)\.(\d+)", release)
    if m is None:
        return None, f"cannot read the kernel version from {release!r}"
    want = tuple(int(x) for x in version.split("."))
    if (int(m[1]), int(m[2])) >= want:
        return True, f"kernel {release} is {version} or newer: not needed"
    return False, f"kernel {release} is older than {version}"


def _hard_limit(step: Step) -> float:
    """How long one attempt may take before it is cancelled (a step's own timeouts come first)."""
    if isinstance(step, WaitHealth):
        return step.timeout_s + HEALTH_GRACE_S
    if isinstance(step, (EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove)):
        return step.timeout_s + MEMBER_GRACE_S
    if isinstance(step, ReplaceFiles):
        return step.timeout_s + (step.rollback_timeout_s if step.rollback else 0.0) + REPLACE_GRACE_S
    return step.timeout_s


def _no_content() -> bytes:
    raise PermanentStepError("this step has no file content")
