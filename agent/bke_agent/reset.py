"""The `ResetNode` step: undo what BKE did to a node, on both backends.

What kubeadm's `reset` does on a node, and what we keep of it (kubeadm's phases, as its
generated reference lists them: preflight, update-cluster-status, remove-etcd-member,
cleanup-node; kubernetes/website content/en/docs/reference/setup-tools/kubeadm/generated/
kubeadm_reset.md, and the cleanup-node phase in kubernetes/kubernetes
cmd/kubeadm/app/cmd/phases/reset/cleanupnode.go):
* preflight and "remove this node from the cluster": the dispatcher's work before it sends this
  step (an etcd snapshot first; a reset goes node by node, members last);
* cleanup-node: stop the kubelet, remove the pods, remove the etcd data directory of a local
  member, /var/lib/kubelet and the contents of /etc/kubernetes (pki, kubeconfigs, manifests).
We take the static pod manifests away FIRST and wait for their pods to stop, then stop the
kubelet: a kubelet stops a static pod whose manifest disappears, so no container runtime
client is needed to end them, and etcd is never killed under a kubelet that would restart it.
Then everything in `RESET_TABLE` goes (what the host backend may write, paths.HOST_WRITE_TABLE:
a unit test holds the two tables together), binaries and units only with `binaries` (a delete).

Idempotent: every removal accepts "already absent", and a manifest already gone leaves nothing
to wait for, so a re-run after a crash finishes the job.

Backends give the mixin three things: `reset_local(node_path)` (the local path, or PathRefused:
the host backend's reset allow-list is `RESET_DIRS` plus `ETCD_DATA_GLOB`), `pods_gone(names,
timeout_s)` (lab: the kubelet stand-in's pods; host: crictl) and `systemd(step)`.
"""
from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from bke.contracts.agent_steps import LeaveEtcdMember, ResetNode, SystemdUnit
from bke.contracts.statuses import StepResultStatus

from .backends.base import StepOutcome
from .errors import StepError

__all__ = ["ETCD_DATA_GLOB", "MANIFESTS", "RESET_DIRS", "RESET_TABLE", "ResetStepsMixin", "pods_of", "remove_tree",
           "reset_targets"]

MANIFESTS = "/etc/kubernetes/manifests"
ETCD_DATA_GLOB = "/var/lib/etcd*"  # the host allows only etcd data dirs here (the spec's default)

# (node path, "config" | "binary", why): what a reset removes; a "binary" row only on delete.
RESET_TABLE: tuple[tuple[str, Literal["config", "binary"], str], ...] = (
    ("/etc/kubernetes", "config", "pki, kubeconfigs, static pod manifests (kubeadm resets the same)"),
    ("/var/lib/kubelet", "config", "the kubelet's config.yaml and state (kubeadm: cleanup-node)"),
    ("/etc/containerd", "config", "containerd's config.toml and registry hosts BKE wrote"),
    ("/etc/systemd/system/kubelet.service", "config", "our kubelet unit"),
    ("/etc/crictl.yaml", "config", "crictl's configuration"),
    ("/etc/modules-load.d/bke.conf", "config", "the kernel modules loaded at boot"),
    ("/etc/modules-load.d/bke-old-kernel.conf", "config", "the modules only a kernel before 4.19 names"),
    ("/etc/sysctl.d/99-bke.conf", "config", "the kernel parameters applied at boot"),
    ("/etc/haproxy", "config", "the control-plane load balancer's configuration"),
    ("/etc/keepalived", "config", "keepalived's configuration and check script"),
    ("/etc/systemd/system/containerd.service", "binary", "our containerd unit (containerd is stopped first)"),
    ("/usr/local/bin/containerd", "binary", "the containerd binary"),
    ("/usr/local/bin/containerd-shim-runc-v2", "binary", "the runc shim"),
    ("/usr/local/sbin/runc", "binary", "runc"),
    ("/usr/local/bin/crictl", "binary", "crictl"),
    ("/opt/cni/bin", "binary", "the CNI plugins BKE placed"),
    ("/usr/bin/kubelet", "binary", "the kubelet binary"),
    ("/usr/bin/kubectl", "binary", "the kubectl binary"),
)
RESET_DIRS: tuple[str, ...] = tuple(p for p, _, _ in RESET_TABLE)
POLL_S = 0.2


def reset_targets(step: ResetNode) -> list[str]:
    """The node paths this step removes, in order: configuration, binaries (on delete), etcd data."""
    rows = [p for p, kind, _ in RESET_TABLE if kind == "config" or step.binaries]
    return [*rows, *step.etcd_data_dirs]


def pods_of(stems: Sequence[str], present: Iterable[str], pods: Iterable[str]) -> list[str]:
    """The `stems` (manifest file names without .yaml) that still have a pod among `pods`, static
    pods being named `<manifest stem>-<node name>`. A pod belongs to the longest stem it starts
    with, among `stems` and the `present` manifests the node keeps: etcd-events-<node> is
    etcd-events', not the etcd-data member's (etcd.yaml) that a node leaving etcd-data waits for."""
    known = sorted({*stems, *present}, key=len, reverse=True)
    owners = {next((s for s in known if p.startswith(f"{s}-")), "") for p in pods}
    return [s for s in stems if s in owners]


def remove_tree(local: Path) -> bool:
    """Remove a file, a symlink (never what it points to) or a directory tree; False if absent."""
    if local.is_symlink() or local.is_file():
        local.unlink(missing_ok=True)
        return True
    if local.is_dir():
        shutil.rmtree(local)  # rmtree does not follow symlinks inside the tree
        return True
    return False


class ResetStepsMixin:
    """`reset_node` and `leave_etcd_member` for a backend that provides `reset_local`,
    `pods_gone` and `systemd`."""

    def reset_local(self, node_path: str) -> Path:
        raise NotImplementedError

    async def pods_gone(self, manifests: list[str], timeout_s: float) -> str:
        """"" once no pod of these manifest files runs, else why not (after `timeout_s`)."""
        raise NotImplementedError

    async def systemd(self, step: SystemdUnit) -> StepOutcome:
        raise NotImplementedError

    async def _stop_unit(self, unit: str) -> str:
        try:
            out = await self.systemd(SystemdUnit(id=f"reset:stop:{unit}", unit=unit, action="stop"))
        except StepError as exc:
            if exc.exit_code == 5:  # systemd: unit not loaded (an earlier run removed its file)
                return f"{unit}: not loaded\n"
            raise
        return out.stdout.decode(errors="replace") if isinstance(out.stdout, bytes) else out.stdout

    async def reset_node(self, step: ResetNode) -> StepOutcome:
        targets = [(p, self.reset_local(p)) for p in reset_targets(step)]  # every path checked before anything goes
        lines: list[str] = []
        # 1. take the static pod manifests away: the kubelet stops their pods
        manifests_dir = self.reset_local(MANIFESTS)
        names = sorted(e.name for e in os.scandir(manifests_dir) if not e.is_dir()) if manifests_dir.is_dir() else []
        for name in names:
            (manifests_dir / name).unlink(missing_ok=True)
        lines += [f"removed manifest {MANIFESTS}/{n}" for n in names]
        # 2. wait until those pods are gone (etcd stops here, before its data goes)
        if names:
            why = await self.pods_gone(names, max(1.0, step.timeout_s / 2))
            if why:
                raise StepError(f"static pods still running after their manifests were removed: {why}")
        # 3. stop the kubelet (and containerd on a delete): nothing recreates what goes next
        lines.append((await self._stop_unit("kubelet.service")).strip())
        if step.binaries:
            lines.append((await self._stop_unit("containerd.service")).strip())
        # 4. remove what BKE wrote and the members' data
        for node_path, local in targets:
            gone = await asyncio.to_thread(remove_tree, local)
            lines.append(f"{'removed' if gone else 'already absent'}: {node_path}")
        return StepOutcome(stdout="\n".join(x for x in lines if x) + "\n")

    async def leave_etcd_member(self, step: LeaveEtcdMember) -> StepOutcome:
        """A member its cluster removed already: its manifest away, its pod gone, then its data
        (in that order for the reason `reset_node` gives: etcd never loses its data under a
        kubelet that would restart it). The kubelet and every other static pod keep running."""
        manifest, data = self.reset_local(step.manifest), self.reset_local(step.data_dir)  # both checked first
        lines: list[str] = []
        if manifest.exists() or manifest.is_symlink():
            manifest.unlink(missing_ok=True)
            lines.append(f"removed manifest {step.manifest}")
        why = await self.pods_gone([manifest.name], max(1.0, step.timeout_s / 2))
        if why:
            raise StepError(f"the etcd member's pod still runs after its manifest was removed: {why}")
        if await asyncio.to_thread(remove_tree, data):
            lines.append(f"removed the member's data: {step.data_dir}")
        if not lines:
            return StepOutcome(status=StepResultStatus.SKIPPED, stdout=f"already gone: {step.manifest}, {step.data_dir}\n")
        return StepOutcome(stdout="\n".join(lines) + "\n")
