"""What a backend is: the code that makes one step happen on a node.

Why a protocol: the executor (timeouts, retries, truncation, stop at the first failure) is
the same for every backend; only "write this file", "start this unit", "is this endpoint
healthy" differ between a real host, a lab node under a directory, and the benchmark's
`NullBackend` whose steps cost nothing. A backend raises `StepError` (see `errors`) to fail
a step and returns a `StepOutcome` otherwise.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from bke.contracts.agent import (
    CheckHost, EtcdSnapshot, FetchFile, RemoveFile, RestartStaticPod, RunProgram, Step, SystemdUnit, WaitHealth, WriteFile,
)

__all__ = ["Backend", "Content", "StepDispatch", "StepOutcome"]

# Opens a WriteFile's content on demand (it may be sealed): a backend that finds the file
# already in place never calls it, so an identical key is not even decrypted.
Content = Callable[[], bytes]


@dataclass(frozen=True)
class StepOutcome:
    status: Literal["Succeeded", "Skipped"] = "Succeeded"
    exit_code: int | None = None
    stdout: bytes | str = b""
    stderr: bytes | str = b""


class Backend(Protocol):
    kind: Literal["host", "lab"]  # what AgentRegistered reports

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def execute(self, step: Step, content: Content) -> StepOutcome: ...


class StepDispatch:
    """Routes each step type to a method; backends subclass it and implement the methods."""

    kind: Literal["host", "lab"] = "host"

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def execute(self, step: Step, content: Content) -> StepOutcome:
        handlers: dict[type, Callable[..., Awaitable[StepOutcome]]] = {
            WriteFile: lambda s: self.write_file(s, content),
            RemoveFile: self.remove_file,
            RunProgram: self.run_program,
            SystemdUnit: self.systemd,
            WaitHealth: self.wait_health,
            FetchFile: self.fetch_file,
            CheckHost: self.check_host,
            RestartStaticPod: self.restart_static_pod,
            EtcdSnapshot: self.etcd_snapshot,
        }
        return await handlers[type(step)](step)

    async def write_file(self, step: WriteFile, content: Content) -> StepOutcome:
        raise NotImplementedError

    async def remove_file(self, step: RemoveFile) -> StepOutcome:
        raise NotImplementedError

    async def run_program(self, step: RunProgram) -> StepOutcome:
        raise NotImplementedError

    async def systemd(self, step: SystemdUnit) -> StepOutcome:
        raise NotImplementedError

    async def wait_health(self, step: WaitHealth) -> StepOutcome:
        raise NotImplementedError

    async def fetch_file(self, step: FetchFile) -> StepOutcome:
        raise NotImplementedError

    async def check_host(self, step: CheckHost) -> StepOutcome:
        raise NotImplementedError

    async def restart_static_pod(self, step: RestartStaticPod) -> StepOutcome:
        raise NotImplementedError

    async def etcd_snapshot(self, step: EtcdSnapshot) -> StepOutcome:
        raise NotImplementedError
