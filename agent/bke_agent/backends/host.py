"""The `host` backend: steps on the real machine.

Why these limits: files are written only under `HOST_WRITE_DIRS` (see `paths`), with the
step's mode and owner; programs run from argv lists, never through a shell, and only those of
`HOST_PROGRAMS` found in fixed directories (see `programs`); units are driven
by `systemctl` found on PATH; binaries are downloaded over http(s) and kept only if their
sha256 matches; `ReplaceFiles` (see `replace`) keeps its backups under the agent's state dir
and asks `crictl` (allowed in `programs`) whether the kubelet runs a replaced static pod;
`ResetNode` (bke_agent.reset) removes only `RESET_DIRS` and `/var/lib/etcd*`, and asks crictl
whether the removed manifests' pods are gone; the etcd membership steps (`etcd_members`) ask the
member at the step's client URL with the node's TLS files. `root` is "/" in production; tests point it at a temporary directory (the
allow-list is then applied relative to it) and put a fake `systemctl` on PATH.
"""
from __future__ import annotations

import asyncio
import grp
import json
import os
import pwd
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath

import httpx

import yaml

from bke.contracts.agent_steps import (
    CheckHost,
    FetchFile,
    NewFile,
    RestartStaticPod,
    RunProgram,
    SystemdUnit,
    WaitHealth,
    WriteFile,
)

from ..errors import PermanentStepError, StepError
from .base import Content, StepDispatch, StepOutcome
from .checks import NodeFacts, run_checks
from .crashloop import Exits
from .cri import CriExits
from .download import fetch_verified
from .etcd_members import EtcdMemberStepsMixin
from .files import FileStepsMixin, ensure_file
from .health import probe_verify, wait_http
from .paths import HOST_WRITE_DIRS, PathPolicy
from ..reset import ETCD_DATA_GLOB, MANIFESTS, POLL_S as RESET_POLL_S, RESET_DIRS, ResetStepsMixin, pods_of
from .proc import ProgramRun, judge, run_argv
from .programs import DROPPED_ENV, HOST_PROGRAMS, PROGRAM_DIRS, resolve_program
from .replace import ReplaceStepsMixin
from .restore import RestoreReceiver, RestoreStepsMixin
from .restart import KUBELET_FILE_CHECK_S, restart_by_manifest
from .snapshot import SnapshotTaker
from ..settings import HOST_STATE_DIR

__all__ = ["HostBackend", "UNIT_NAME", "systemctl_args"]

UNIT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9@._:\\-]*$")  # no leading '-': never an option


def systemctl_args(step: SystemdUnit) -> list[str]:
    """The systemctl arguments of a step (a unit name is validated, never an option)."""
    if step.action == "daemon-reload":
        return ["daemon-reload"]
    if not UNIT_NAME.match(step.unit):
        raise PermanentStepError(f"{step.unit!r} is not a systemd unit name")
    if step.action == "enable-now":
        return ["enable", "--now", step.unit]
    return [step.action, step.unit]


def _owner(user: str, group: str) -> tuple[int | None, int | None]:
    """uid/gid of the step's owner; only a root agent can give files away, so others keep theirs."""
    if os.geteuid() != 0:
        return None, None
    try:
        uid = pwd.getpwnam(user).pw_uid
    except KeyError:
        raise PermanentStepError(f"unknown user {user!r} on this node") from None
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise PermanentStepError(f"unknown group {group!r} on this node") from None
    return uid, gid


class HostBackend(EtcdMemberStepsMixin, ResetStepsMixin, RestoreStepsMixin, ReplaceStepsMixin, FileStepsMixin,
                  StepDispatch):
    kind = "host"

    def __init__(self, root: Path = Path("/"), allowed: Sequence[str] = HOST_WRITE_DIRS, *,
                 systemctl: str = "systemctl", env: Mapping[str, str] | None = None,
                 http_transport: httpx.AsyncBaseTransport | None = None,
                 programs: Mapping[str, str] = HOST_PROGRAMS, program_dirs: Sequence[str] = PROGRAM_DIRS,
                 state_dir: Path = HOST_STATE_DIR, snapshots: SnapshotTaker | None = None,
                 restores: RestoreReceiver | None = None) -> None:
        self.root = Path(root)
        self.state_dir = Path(state_dir)
        self.policy = PathPolicy(self.root, allowed)
        # A reset removes only what BKE wrote (bke_agent.reset.RESET_TABLE) and etcd data dirs
        self.reset_policy = PathPolicy(self.root, (*RESET_DIRS, ETCD_DATA_GLOB))
        self.systemctl = systemctl
        self.env = {k: v for k, v in (os.environ if env is None else env).items() if k not in DROPPED_ENV}
        self.http_transport = http_transport
        self.programs, self.program_dirs = programs, program_dirs
        self.snapshots = snapshots
        self.restores = restores

    async def write_file(self, step: WriteFile, content: Content) -> StepOutcome:
        local = self.policy.local(step.path)
        uid, gid = _owner(step.owner, step.group)
        return ensure_file(local, content, step.sha256, step.mode, uid=uid, gid=gid, node_path=step.path)

    async def run_program(self, step: RunProgram) -> StepOutcome:
        argv = resolve_program(step.argv, step.env, self.programs, self.program_dirs)
        run = await run_argv(argv, env={**self.env, **step.env})
        return judge(step, run)

    async def systemd(self, step: SystemdUnit) -> StepOutcome:
        argv = [self.systemctl, *systemctl_args(step)]
        run = await run_argv(argv, env=self.env)
        if run.exit_code != 0:
            why = f"{' '.join(argv)} exited with {run.exit_code}"
            raise StepError(why, exit_code=run.exit_code, stdout=run.stdout, stderr=run.stderr + f"\n{why}\n".encode())
        return StepOutcome(exit_code=0, stdout=run.stdout, stderr=run.stderr)

    async def wait_health(self, step: WaitHealth) -> StepOutcome:
        return await wait_http(step.url, expect_status=step.expect_status, expect_body=step.expect_body,
                               timeout_s=step.timeout_s, verify=probe_verify(self.root, step.url, step.tls))

    async def fetch_file(self, step: FetchFile) -> StepOutcome:
        return await fetch_verified(self.policy.local(step.path), step, self.http_transport)

    async def check_host(self, step: CheckHost) -> StepOutcome:
        return run_checks(NodeFacts(self.root, "0.0.0.0", lab=False), step)

    async def restart_static_pod(self, step: RestartStaticPod) -> StepOutcome:
        return await restart_by_manifest(self.policy, step)

    # ReplaceOps of its own (the rest: ReplaceStepsMixin)

    async def download(self, f: NewFile, staged: Path) -> None:
        fetch = FetchFile(id="replace", url=f.url or "", path=f.path, sha256=f.sha256, mode=f.mode)
        await fetch_verified(staged, fetch, self.http_transport)

    async def pod_started(self, node_path: str, sha256: str, since: float) -> str:
        """Whether containerd has a ready sandbox of this static pod created since `since`.

        The kubelet gives a changed static pod a new UID, so a new sandbox; its config hash is
        not the file's sha256, hence the creation time (`crictl pods -o json`: `createdAt`, in
        nanoseconds, kubernetes-sigs/cri-tools cmd/crictl/sandbox.go; static pods are named
        `<metadata.name>-<node name>`). Verified on paper only: the tests have no containerd.
        Without crictl, the kubelet's file check period is waited instead (as `restart`).
        """
        try:
            meta = yaml.safe_load(self.policy.local(node_path).read_bytes())["metadata"]
            name, namespace = str(meta["name"]), str(meta.get("namespace") or "kube-system")
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            return f"cannot read the manifest: {type(exc).__name__}"
        try:
            argv = resolve_program(["crictl", "pods", "--namespace", namespace, "--state", "ready", "-o", "json"], {},
                                   self.programs, self.program_dirs)
        except PermanentStepError:
            left = since + KUBELET_FILE_CHECK_S - time.time()
            return "" if left <= 0 else f"no crictl here; waiting the kubelet's file check ({left:.0f}s more)"
        run = await run_argv(argv, env=self.env)
        if run.exit_code != 0:
            return f"crictl pods exited with {run.exit_code}: {run.stderr.decode(errors='replace')[-200:]}"
        try:
            items = json.loads(run.stdout).get("items") or []
        except (ValueError, AttributeError):
            return "crictl pods: not JSON"
        for item in items:
            pod = item.get("metadata") or {}
            if str(pod.get("name", "")).startswith(f"{name}-") and int(item.get("createdAt") or 0) >= since * 1e9:
                return ""
        return f"no ready pod sandbox of {name} created since the write"

    async def pod_exits(self, node_path: str, sha256: str, since: float, detail: bool) -> Exits:
        """From containerd through crictl (`cri`); no crictl here: none known."""
        return await CriExits(self._crictl, lambda p: self.policy.local(p).read_bytes()).pod_exits(
            node_path, sha256, since, detail)

    async def _crictl(self, args: list[str]) -> ProgramRun | None:
        """crictl's answer, None when it cannot be asked: counting exits only ever shortens a
        wait, so a crictl that fails must not fail the step."""
        try:
            return await run_argv(resolve_program(["crictl", *args], {}, self.programs, self.program_dirs), env=self.env)
        except StepError:
            return None

    def etcdutl_path(self) -> str:
        """etcdutl from the program allow-list's fixed directories (etcd's release tarball)."""
        return resolve_program(["etcdutl"], {}, self.programs, self.program_dirs)[0]

    # ResetStepsMixin's own parts: the reset allow-list; pods as containerd has them

    def reset_local(self, node_path: str) -> Path:
        return self.reset_policy.local(node_path)

    async def pods_gone(self, manifests: list[str], timeout_s: float) -> str:
        """No ready sandbox named `<manifest stem>-*` (BKE names a manifest after its pod; static
        pods are `<metadata.name>-<node name>`, see pod_started). Verified on paper only: the
        tests have no containerd. Without crictl, the kubelet's file check period is waited."""
        stems = [PurePosixPath(m).stem for m in manifests]
        deadline = time.monotonic() + timeout_s
        try:
            argv = resolve_program(["crictl", "pods", "--state", "ready", "-o", "json"], {}, self.programs,
                                   self.program_dirs)
        except PermanentStepError:
            await asyncio.sleep(min(KUBELET_FILE_CHECK_S, timeout_s))  # the kubelet's own period, no client to ask
            return ""
        while True:
            run = await run_argv(argv, env=self.env)
            if run.exit_code != 0:  # containerd already stopped: its pods are gone too
                return ""
            try:
                items = json.loads(run.stdout).get("items") or []
            except (ValueError, AttributeError):
                return "crictl pods: not JSON"
            names = [str((i.get("metadata") or {}).get("name", "")) for i in items]
            manifests_dir = self.reset_local(MANIFESTS)
            present = [PurePosixPath(e.name).stem for e in os.scandir(manifests_dir)] if manifests_dir.is_dir() else []
            left = pods_of(stems, present, names)
            if not left:
                return ""
            if time.monotonic() >= deadline:
                return ", ".join(left)
            await asyncio.sleep(RESET_POLL_S)  # polling crictl under the step's deadline
