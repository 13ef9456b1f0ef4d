"""What a backend is: the code that makes one step happen on a node.

Why a protocol: the executor (timeouts, retries, truncation, stop at the first failure) is
the same for every backend; only "write this file", "start this unit", "is this endpoint
healthy" differ between a real host, a lab node under a directory, and the benchmark's
`NullBackend` whose steps cost nothing. A backend raises `StepError` (see `errors`) to fail
a step and returns a `StepOutcome` otherwise.

`COMMAND_ID` is the id of the command whose step runs (set by the executor around each
`execute`): a `ReplaceFiles` step names its backup after it. A context variable rather than an
`execute` argument because only that step needs it, and every backend, wrapper and test double
keeps the two-argument `execute`.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal, Protocol

from bke.contracts.agent_steps import (
    CheckHost,
    EtcdMemberAdd,
    EtcdMemberPromote,
    EtcdMemberRemove,
    EtcdSnapshot,
    FetchFile,
    LeaveEtcdMember,
    ParkStaticPod,
    RemoveFile,
    ReplaceFiles,
    ResetNode,
    RestartStaticPod,
    RestoreEtcdMember,
    RunProgram,
    Step,
    SystemdUnit,
    WaitHealth,
    WriteFile,
)
from bke.contracts.statuses import StepResultStatus

__all__ = ["COMMAND_ID", "Backend", "Content", "StepDispatch", "StepOutcome"]

# Opens a WriteFile's content on demand (it may be sealed): a backend that finds the file
# already in place never calls it, so an identical key is not even decrypted.
Content = Callable[[], bytes]
COMMAND_ID: ContextVar[str] = ContextVar("bke_agent_command_id", default="")


@dataclass(frozen=True)
class StepOutcome:
    # a backend raises on failure (bke_agent.errors): what it returns is done, or had nothing to do
    status: Literal[StepResultStatus.SUCCEEDED, StepResultStatus.SKIPPED] = StepResultStatus.SUCCEEDED
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
            ReplaceFiles: self.replace_files,
            EtcdSnapshot: self.etcd_snapshot,
            ParkStaticPod: self.park_static_pod,
            RestoreEtcdMember: self.restore_etcd_member,
            ResetNode: self.reset_node,
            EtcdMemberAdd: self.etcd_member_add,
            EtcdMemberPromote: self.etcd_member_promote,
            EtcdMemberRemove: self.etcd_member_remove,
            LeaveEtcdMember: self.leave_etcd_member,
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

    async def replace_files(self, step: ReplaceFiles) -> StepOutcome:
        raise NotImplementedError

    async def etcd_snapshot(self, step: EtcdSnapshot) -> StepOutcome:
        raise NotImplementedError

    async def park_static_pod(self, step: ParkStaticPod) -> StepOutcome:
        raise NotImplementedError

    async def restore_etcd_member(self, step: RestoreEtcdMember) -> StepOutcome:
        raise NotImplementedError

    async def reset_node(self, step: ResetNode) -> StepOutcome:
        raise NotImplementedError

    async def etcd_member_add(self, step: EtcdMemberAdd) -> StepOutcome:
        raise NotImplementedError

    async def etcd_member_promote(self, step: EtcdMemberPromote) -> StepOutcome:
        raise NotImplementedError

    async def etcd_member_remove(self, step: EtcdMemberRemove) -> StepOutcome:
        raise NotImplementedError

    async def leave_etcd_member(self, step: LeaveEtcdMember) -> StepOutcome:
        raise NotImplementedError
