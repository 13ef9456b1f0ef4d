"""Backends: how a step happens on a node (`host`, `lab`, and the benchmark's `NullBackend`)."""
from __future__ import annotations

from ..settings import AgentSettings
from .base import Backend, Content, StepDispatch, StepOutcome
from .host import HostBackend
from .lab import LabBackend
from .null import NullBackend
from .paths import HOST_WRITE_DIRS, PathPolicy
from .restore import RestoreReceiver
from .snapshot import SnapshotTaker

__all__ = [
    "HOST_WRITE_DIRS",
    "Backend",
    "Content",
    "HostBackend",
    "LabBackend",
    "NullBackend",
    "PathPolicy",
    "RestoreReceiver",
    "SnapshotTaker",
    "StepDispatch",
    "StepOutcome",
    "make_backend",
]


def make_backend(settings: AgentSettings, snapshots: SnapshotTaker | None = None,
                 restores: RestoreReceiver | None = None) -> Backend:
    """The backend `settings.backend` names, rooted where the settings say; `snapshots` stores
    what `EtcdSnapshot` steps take, `restores` receives what `RestoreEtcdMember` steps restore
    (None: such steps fail, saying so)."""
    if settings.backend == "lab":
        return LabBackend(settings.root, settings.ip, state_dir=settings.state_path,
                          kubelet_poll_s=settings.kubelet_poll_s,
                          log_ids={"cluster": settings.cluster, "node": settings.node},
                          fetch=settings.lab_fetch, snapshots=snapshots, restores=restores)
    return HostBackend(settings.root, state_dir=settings.state_path, snapshots=snapshots, restores=restores)
