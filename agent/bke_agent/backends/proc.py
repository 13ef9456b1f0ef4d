"""Run a program from an argv list (never a shell) and make sure it dies with its step.

Why a process group: a step that times out is cancelled; the program and anything it forked
must go with it, or a stuck `kubeadm` would outlive the step that started it.
"""
from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from bke.contracts.agent_steps import RunProgram

from ..errors import PermanentStepError, StepError
from .base import StepOutcome

__all__ = ["ProgramRun", "judge", "run_argv"]

KILL_GRACE_S = 2.0


@dataclass(frozen=True)
class ProgramRun:
    exit_code: int
    stdout: bytes
    stderr: bytes


def _kill_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


async def run_argv(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> ProgramRun:
    """Run `argv` to completion; a missing program is a permanent failure."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=dict(env) if env is not None else None, cwd=cwd,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise PermanentStepError(f"program not found: {argv[0]}", exit_code=127) from None
    except PermissionError:
        raise PermanentStepError(f"program not executable: {argv[0]}", exit_code=126) from None
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:
        _kill_group(proc, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
        except TimeoutError:
            _kill_group(proc, signal.SIGKILL)
            await proc.wait()
        raise
    return ProgramRun(proc.returncode if proc.returncode is not None else -1, out, err)


def judge(step: RunProgram, run: ProgramRun) -> StepOutcome:
    """A program's run as a step outcome: its exit code decides (`ok_exit_codes`)."""
    if run.exit_code in step.ok_exit_codes:
        return StepOutcome(exit_code=run.exit_code, stdout=run.stdout, stderr=run.stderr)
    tail = f"\n{step.argv[0]} exited with {run.exit_code}\n".encode()
    raise StepError(f"{step.argv[0]} exited with {run.exit_code}", exit_code=run.exit_code,
                    stdout=run.stdout, stderr=run.stderr + tail)
