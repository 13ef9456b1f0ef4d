"""A replaced static pod that keeps exiting fails its step early, with its own last error line.

kubeadm waits its whole timeout for a component that will never start (kubernetes/kubernetes
cmd/kubeadm/app/phases/upgrade/staticpods.go, `upgradeComponent`: `WaitForStaticPodHashChange`
then `WaitForPodsWithLabel` until the timeout, then the rollback), and its error says only
that the pod did not come up. A ReplaceFiles step instead watches, beside its pod and probe
waits, how often the new pod's container has exited since the new manifest was written; at
`CRASH_EXITS` exits it stops waiting, and its reason carries what the component itself last
said (`errorlines`).

Why three exits: one or two can be a transient that a restart cures (an apiserver started
before its etcd answers; a controller-manager or scheduler exits on purpose when it loses its
lease, and is restarted). The same new pod exiting three times in a row is not that. It costs
little: the kubelet restarts a crashed container after 10 s, then 20 s, 40 s ... up to 300 s
(kubernetes/kubernetes pkg/kubelet/kubelet.go at v1.36.3, `initialCrashLoopBackOff` and
`MaxCrashLoopBackOff`; the alpha gate ReduceDefaultCrashLoopBackOffDecay starts at 1 s), so the
third exit comes about 30 s after the first, where the step's timeout is 180 s; the lab's
kubelet stand-in restarts after 1 s, then 2 s, so there it takes a few seconds.

Where the exits come from (`ExitSource`, one method): on a host, the container runtime through
crictl (`cri`); in the lab, the kubelet stand-in's record of its pod (`LabBackend.pod_exits`).
Counting only stops a wait early: a pod that never exits still has the step's whole timeout.
"""
from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from .errorlines import error_lines

__all__ = ["CRASH_EXITS", "Exits", "ExitSource", "crash_reason", "watch_crash_loops"]

CRASH_EXITS = 3
WATCH_EVERY_S = 1.0  # one `crictl ps` per changed manifest per second on a host


@dataclass(frozen=True)
class Exits:
    """How often the container of a static pod of given bytes exited since a given time."""

    count: int = 0
    code: int | None = None  # the last exit's code, when the source knows it
    log_tail: str = ""  # the end of its log (raw: only `error_lines` of it is ever shown)


class ExitSource(Protocol):
    async def pod_exits(self, node_path: str, sha256: str, since: float, detail: bool) -> Exits:
        """Exits of the pod the kubelet runs from manifest `node_path` holding bytes `sha256`,
        since `since` (epoch seconds). `detail`: also its last exit code and log tail (asked
        once, when the count says the step fails)."""
        ...


def crash_reason(manifest: str, exits: Exits) -> str:
    """One line: what exited, how often, and its own last error line(s)."""
    name = PurePosixPath(manifest).stem
    code = f", last with exit code {exits.code}" if exits.code is not None else ""
    said = " | ".join(error_lines(exits.log_tail))
    return (f"{name} exited {exits.count} times since its new manifest was written{code}"
            + (f"; its last error: {said}" if said else "; it logged nothing"))


async def watch_crash_loops(source: ExitSource, pods: list[tuple[str, str]], since: float,
                            waiting: "asyncio.Future[str]") -> tuple[str, bool]:
    """(`waiting`'s answer, False), unless a pod of `pods` (node path, sha256) exits
    `CRASH_EXITS` times first: then `waiting` is cancelled and (the crash, True) is the answer."""
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=WATCH_EVERY_S)
        if done:
            return waiting.result(), False
        for path, sha in pods:
            if (await source.pod_exits(path, sha, since, False)).count >= CRASH_EXITS:
                detail = await source.pod_exits(path, sha, since, True)
                waiting.cancel()
                await asyncio.gather(waiting, return_exceptions=True)
                return crash_reason(path, Exits(max(detail.count, CRASH_EXITS), detail.code, detail.log_tail)), True
