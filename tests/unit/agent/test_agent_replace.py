"""ReplaceFiles on a node tree in a temp dir, through the real executor and the lab backend's
paths and downloads; only restarts, probes and "the kubelet runs the new pod" are scripted
(no network): backup kept on a re-run, unchanged files not restarted, a download with a wrong
sha256 replacing nothing, a rollback restoring old files and removing new ones."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import stat
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from bke.lab.standins.binary_placeholder import lab_binary_bytes, lab_binary_sha256
from bke.contracts.agent import AgentCommand, StepResult
from bke.contracts.agent_steps import HealthProbe, NewFile, ReplaceFiles
from bke_agent import AgentIdentity, Executor, HostBackend, LabBackend, LabLayout, NullBackend
from bke_agent.backends.replace import replace_files
from bke_agent.errors import NotHealthy, StepError
from bke_agent.lablayout import image_version, write_fault

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
MANIFEST = "/etc/kubernetes/manifests/kube-apiserver.yaml"
CONFIG = "/var/lib/kubelet/config.yaml"
URL = "http://repo.example/kubernetes/v1.36.2/bin/linux/amd64/kubelet"
LIVEZ = "https://127.0.0.1:6443/livez"
OLD, NEW, BROKEN = b"image: kube-apiserver:v1.35.0\n", b"image: kube-apiserver:v1.36.2\n", b"broken\n"


class Node(LabBackend):
    """The lab backend with scripted restarts and probes: healthy unless `sick()` says why not."""

    def __init__(self, root: Path, sick: Callable[[Path], str] = lambda _root: "", fail_restart: bool = False) -> None:
        super().__init__(root, "127.0.0.1")
        self.sick, self.fail_restart = sick, fail_restart
        self.restarts: list[str] = []
        self.probed: list[float] = []

    async def restart_unit(self, unit: str) -> None:
        self.restarts.append(unit)
        if self.fail_restart:
            raise StepError(f"systemctl restart {unit} exited with 1")

    async def probe(self, probe: HealthProbe, timeout_s: float) -> None:
        self.probed.append(timeout_s)
        if why := self.sick(self.root):
            raise NotHealthy(probe.url, timeout_s, why)

    async def pod_started(self, node_path: str, sha256: str, since: float) -> str:
        return ""


def _inline(path: str, data: bytes, mode: int = 0o644) -> NewFile:
    return NewFile(path=path, mode=mode, content_b64=base64.b64encode(data).decode(),
                   sha256=hashlib.sha256(data).hexdigest())


def _step(*files: NewFile, **kw: object) -> ReplaceFiles:
    return ReplaceFiles(id="replace:kube-apiserver", files=list(files), probes=[HealthProbe(url=LIVEZ)],
                        timeout_s=1, rollback_timeout_s=1, **kw)  # type: ignore[arg-type]


async def _run(backend: object, step: ReplaceFiles, command_id: str = "c1/upgrade/m1/0") -> StepResult:
    cmd = AgentCommand(command_id=command_id, cluster="c1", node="m1", phase="upgrade", issued_at="t", steps=[step])
    executor = Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW)  # type: ignore[arg-type]
    [res] = (await executor.run(cmd)).steps
    return res


def _put(root: Path, node_path: str, data: bytes, mode: int = 0o644) -> Path:
    p = root / node_path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    p.chmod(mode)
    return p


def _backup(root: Path, command_id: str = "c1/upgrade/m1/0", step_id: str = "replace:kube-apiserver") -> Path:
    return root / "var/lib/bke-agent/replace-backups" / quote(command_id, safe="-_.@") / quote(step_id, safe="-_.@")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "hosts/m1"
    r.mkdir(parents=True)
    return r


async def test_replaces_after_a_backup_restarts_and_succeeds(root: Path) -> None:
    manifest = _put(root, MANIFEST, OLD, 0o600)
    node = Node(root)
    res = await _run(node, _step(_inline(MANIFEST, NEW, 0o640), restart_units=["kubelet.service"]))
    assert res.status == "Succeeded", res.stderr
    assert f"replaced {MANIFEST}; restarted kubelet.service; healthy" in res.stdout
    assert manifest.read_bytes() == NEW and stat.S_IMODE(manifest.stat().st_mode) == 0o640
    assert node.restarts == ["kubelet.service"] and node.probed
    backup = _backup(root)
    doc = json.loads((backup / "backup.json").read_text())
    [entry] = doc["files"]
    assert entry["path"] == MANIFEST and entry["existed"] and entry["mode"] == 0o600
    assert (backup / entry["copy"]).read_bytes() == OLD
    assert stat.S_IMODE((backup / entry["copy"]).stat().st_mode) == 0o600  # a key's copy stays private


async def test_unchanged_files_and_healthy_probes_succeed_without_restart(root: Path) -> None:
    _put(root, MANIFEST, NEW, 0o600)
    node = Node(root)
    res = await _run(node, _step(_inline(MANIFEST, NEW, 0o600), restart_units=["kubelet.service"]))
    assert res.status == "Skipped" and f"unchanged: {MANIFEST}" in res.stdout
    assert node.restarts == [] and node.probed  # the probes still ran


async def test_a_rerun_of_the_same_command_keeps_the_first_backup_and_restarts_again(root: Path) -> None:
    """The agent crashed after writing: the files already hold the new bytes, yet the units
    restart (they may still run the old ones) and the backup still holds the OLD bytes."""
    _put(root, MANIFEST, OLD)
    step = _step(_inline(MANIFEST, NEW), restart_units=["kubelet.service"])
    node = Node(root)
    assert (await _run(node, step)).status == "Succeeded"
    copy = _backup(root) / "files/0"
    stamp = (root / MANIFEST.lstrip("/")).stat().st_mtime_ns
    again = await _run(node, step)  # the same command id: as redelivered after a crash
    assert again.status == "Succeeded" and node.restarts == ["kubelet.service"] * 2
    assert copy.read_bytes() == OLD  # not the new bytes that were in place by then
    assert (root / MANIFEST.lstrip("/")).stat().st_mtime_ns == stamp  # not rewritten
    other = await _run(node, step, command_id="c1/upgrade/m1/1")  # another command: nothing to do
    assert other.status == "Skipped" and node.restarts == ["kubelet.service"] * 2
    assert json.loads((_backup(root, "c1/upgrade/m1/1") / "backup.json").read_text())["files"][0]["sha256"] == \
        hashlib.sha256(NEW).hexdigest()


async def test_a_download_with_a_wrong_sha256_replaces_nothing(root: Path) -> None:
    manifest = _put(root, MANIFEST, OLD)
    kubelet = _put(root, "/usr/bin/kubelet", b"old kubelet", 0o755)
    node = Node(root)
    bad = NewFile(path="/usr/bin/kubelet", mode=0o755, url=URL, sha256=lab_binary_sha256(URL + "x"))
    res = await _run(node, _step(_inline(MANIFEST, NEW), bad, retries=2))
    assert res.status == "Failed" and res.attempts == 1 and "does not match the lab placeholder" in res.stderr
    assert manifest.read_bytes() == OLD and kubelet.read_bytes() == b"old kubelet"
    assert node.restarts == [] and not _backup(root).exists()
    assert sorted(p.name for p in kubelet.parent.iterdir()) == ["kubelet"]  # no staged file left

    good = bad.model_copy(update={"sha256": lab_binary_sha256(URL)})
    assert (await _run(node, _step(good, restart_units=["kubelet.service"]), "c1/upgrade/m1/1")).status == "Succeeded"
    assert kubelet.read_bytes() == lab_binary_bytes(URL) and os.access(kubelet, os.X_OK)


def _broken_when_new(root: Path) -> str:
    return "HTTP 500 unhealthy" if (root / MANIFEST.lstrip("/")).read_bytes() == BROKEN else ""


async def test_rollback_restores_old_files_and_removes_new_ones(root: Path) -> None:
    manifest = _put(root, MANIFEST, OLD, 0o600)
    node = Node(root, _broken_when_new)
    res = await _run(node, _step(_inline(MANIFEST, BROKEN), _inline(CONFIG, b"new: config\n"),
                                 restart_units=["kubelet.service"]))
    assert res.status == "Failed" and res.attempts == 1
    assert res.stderr == (f"rolled back {MANIFEST}, {CONFIG}: not healthy within 1s ({LIVEZ}: HTTP 500 unhealthy); "
                          "the previous files are back and healthy")
    assert manifest.read_bytes() == OLD and stat.S_IMODE(manifest.stat().st_mode) == 0o600
    assert not (root / CONFIG.lstrip("/")).exists()  # it did not exist before
    assert node.restarts == ["kubelet.service"] * 2  # after the write, after the restore


async def test_rollback_says_when_the_old_files_are_not_healthy_either(root: Path) -> None:
    manifest = _put(root, MANIFEST, OLD)
    node = Node(root, lambda _r: "HTTP 500 always")
    res = await _run(node, _step(_inline(MANIFEST, NEW)))
    assert res.status == "Failed"
    assert res.stderr.endswith(f"the previous files are back but NOT healthy: {LIVEZ}: HTTP 500 always")
    assert manifest.read_bytes() == OLD


async def test_a_unit_that_fails_to_restart_is_rolled_back_too(root: Path) -> None:
    manifest = _put(root, MANIFEST, OLD)
    res = await _run(Node(root, fail_restart=True), _step(_inline(MANIFEST, NEW), restart_units=["kubelet.service"]))
    assert res.status == "Failed"
    assert res.stderr.startswith(f"rolled back {MANIFEST}: systemctl restart kubelet.service exited with 1")
    assert manifest.read_bytes() == OLD


async def test_without_rollback_the_new_files_stay(root: Path) -> None:
    manifest = _put(root, MANIFEST, OLD)
    res = await _run(Node(root, _broken_when_new), _step(_inline(MANIFEST, BROKEN), rollback=False))
    assert res.status == "Failed" and "rollback is off: the new files stay" in res.stderr
    assert manifest.read_bytes() == BROKEN


async def test_null_backend_succeeds_without_touching_anything() -> None:
    backend = NullBackend()
    res = await _run(backend, _step(_inline(MANIFEST, NEW)))
    assert res.status == "Succeeded" and backend.steps_run == 1


async def test_host_backend_refuses_paths_outside_its_allow_list(tmp_path: Path) -> None:
    backend = HostBackend(tmp_path, state_dir=tmp_path / "state")
    res = await _run(backend, _step(_inline(MANIFEST, NEW), _inline("/etc/passwd", b"x\n")))
    assert res.status == "Failed" and "/etc/passwd: outside the directories this agent may write" in res.stderr
    assert not (tmp_path / MANIFEST.lstrip("/")).exists() and not (tmp_path / "state").exists()


async def test_host_backend_asks_crictl_whether_the_new_static_pod_runs(tmp_path: Path) -> None:
    """`crictl pods -o json` (a stand-in script): a ready sandbox of `<name>-<node>` created
    at or after the write is the new pod; an older one is not."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    created_ns = 1_800_000_000 * 10**9
    doc = {"items": [{"metadata": {"name": "kube-apiserver-m1", "namespace": "kube-system"},
                      "state": "SANDBOX_READY", "createdAt": str(created_ns)}]}
    crictl = bindir / "crictl"
    crictl.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(doc)}\nEOF\n")
    crictl.chmod(0o755)
    backend = HostBackend(tmp_path, program_dirs=(str(bindir),), state_dir=tmp_path / "state")
    _put(tmp_path, MANIFEST, b"apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver, namespace: kube-system}\n")
    assert await backend.pod_started(MANIFEST, "", 1_800_000_000.0) == ""
    assert "no ready pod sandbox of kube-apiserver" in await backend.pod_started(MANIFEST, "", 1_800_000_001.0)


async def test_a_step_cancelled_after_the_write_puts_the_old_files_back(root: Path) -> None:
    """The executor's hard timeout or the agent's stop cancels the step while it waits for
    the probes: the backup comes back before the cancellation goes on."""
    manifest = _put(root, MANIFEST, OLD)
    probing = asyncio.Event()

    class Hanging(Node):
        async def probe(self, probe: HealthProbe, timeout_s: float) -> None:
            probing.set()
            await asyncio.Event().wait()  # never answers

    node = Hanging(root)
    task = asyncio.create_task(replace_files(_step(_inline(MANIFEST, NEW)), node, node.state_dir, "c1/upgrade/m1/0"))
    await asyncio.wait_for(probing.wait(), 10)
    assert manifest.read_bytes() == NEW
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert manifest.read_bytes() == OLD


def test_lab_faults_name_one_version_of_one_component(root: Path) -> None:
    assert image_version("registry.k8s.io/kube-apiserver:v1.36.2") == "v1.36.2"
    assert image_version("localhost:5000/kube-scheduler") == "" and image_version("etcd:3.5.21-0@sha256:ab") == "3.5.21-0"
    layout = LabLayout(root)
    assert layout.unhealthy_versions("kube-apiserver") == set()
    write_fault(root, "kube-apiserver", "v1.36.2")
    write_fault(root, "kube-apiserver", "v1.36.2")  # idempotent
    write_fault(root, "kube-scheduler", "v1.36.3")
    assert json.loads(layout.faults_file.read_text())["unhealthy"] == [
        {"component": "kube-apiserver", "version": "v1.36.2"}, {"component": "kube-scheduler", "version": "v1.36.3"}]
    assert layout.unhealthy_versions("kube-apiserver") == {"v1.36.2"}


async def test_host_downloads_checks_restarts_through_systemctl_and_rolls_back(tmp_path: Path) -> None:
    """The host backend without the network: the httpRepo is an httpx MockTransport and
    systemctl a script that records its arguments. The steps have no probe (WaitHealth opens
    its own client); the failure that rolls back is a unit that does not restart."""
    payload = b"\x7fELF new kubelet"
    hits: list[str] = []

    def repo(request: httpx.Request) -> httpx.Response:
        hits.append(str(request.url))
        return httpx.Response(200, content=payload)

    bindir, root = tmp_path / "bin", tmp_path / "root"
    bindir.mkdir()
    log = tmp_path / "systemctl.log"
    systemctl = bindir / "systemctl"
    systemctl.write_text('#!/bin/sh\nprintf \'%s\\n\' "$*" >> "$LOG"\n[ "$2" = broken.service ] && exit 1\nexit 0\n')
    systemctl.chmod(0o755)
    backend = HostBackend(root, env={"LOG": str(log), "PATH": "/usr/bin:/bin"}, systemctl=str(systemctl),
                          http_transport=httpx.MockTransport(repo), state_dir=tmp_path / "state")
    kubelet = _put(root, "/usr/bin/kubelet", b"old kubelet", 0o755)
    new = NewFile(path="/usr/bin/kubelet", mode=0o755, url=URL, sha256=hashlib.sha256(payload).hexdigest())

    bad = await _run(backend, ReplaceFiles(id="r", files=[new.model_copy(update={"sha256": "1" * 64})]))
    assert bad.status == "Failed" and "does not match the expected" in bad.stderr
    assert kubelet.read_bytes() == b"old kubelet" and not log.exists()

    ok = await _run(backend, ReplaceFiles(id="r", files=[new], restart_units=["kubelet.service"]), "c1/upgrade/m1/1")
    assert ok.status == "Succeeded", ok.stderr
    assert kubelet.read_bytes() == payload and stat.S_IMODE(kubelet.stat().st_mode) == 0o755
    assert log.read_text() == "restart kubelet.service\n" and len(hits) == 2
    assert sorted(p.name for p in kubelet.parent.iterdir()) == ["kubelet"]

    newer = b"\x7fELF newer kubelet"
    payload = newer
    step = ReplaceFiles(id="r", files=[new.model_copy(update={"sha256": hashlib.sha256(newer).hexdigest()})],
                        restart_units=["kubelet.service", "broken.service"])
    res = await _run(backend, step, "c1/upgrade/m1/2")
    assert res.status == "Failed" and res.stderr.startswith("rolled back /usr/bin/kubelet: ")
    assert kubelet.read_bytes() == b"\x7fELF new kubelet"  # the previous binary is back
    assert log.read_text().splitlines()[1:] == ["restart kubelet.service", "restart broken.service"] * 2


KEY = "/etc/kubernetes/pki/apiserver.key"


async def _run_as(identity: AgentIdentity, backend: object, step: ReplaceFiles) -> StepResult:
    cmd = AgentCommand(command_id="c1/upgrade/m1/0", cluster="c1", node="m1", phase="upgrade", issued_at="t", steps=[step])
    [res] = (await Executor(backend, identity, now=lambda: NOW).run(cmd)).steps  # type: ignore[arg-type]
    return res


def _sealed(identity: AgentIdentity, path: str, data: bytes, mode: int = 0o600) -> NewFile:
    from bke.core.secrets.sealing import public_key_from_raw, seal

    public = public_key_from_raw(base64.b64decode(identity.public_key_b64))
    return NewFile(path=path, mode=mode, sealed_b64=base64.b64encode(seal(public, data)).decode(),
                   sha256=hashlib.sha256(data).hexdigest())


async def test_a_sealed_key_is_opened_by_its_agent_and_rolled_back_with_the_manifest(root: Path) -> None:
    """An upgrade's renewed key rides sealed in the manifest's step: the agent opens it in
    memory, and a rollback puts the old key back together with the old manifest."""
    me = AgentIdentity.ephemeral()
    _put(root, MANIFEST, OLD)
    key = _put(root, KEY, b"old key\n", 0o600)
    ok = await _run_as(me, Node(root), _step(_inline(MANIFEST, NEW), _sealed(me, KEY, b"new key\n")))
    assert ok.status == "Succeeded", ok.stderr
    assert key.read_bytes() == b"new key\n" and stat.S_IMODE(key.stat().st_mode) == 0o600
    assert "new key" not in ok.stdout + ok.stderr

    _put(root, MANIFEST, OLD)
    key.write_bytes(b"old key\n")
    sick = Node(root, sick=lambda r: "HTTP 500" if (r / MANIFEST.lstrip("/")).read_bytes() == BROKEN else "")
    res = await _run_as(me, sick, _step(_inline(MANIFEST, BROKEN), _sealed(me, KEY, b"newer key\n")))
    assert res.status == "Failed" and "rolled back" in res.stderr
    assert key.read_bytes() == b"old key\n" and (root / MANIFEST.lstrip("/")).read_bytes() == OLD


async def test_a_file_sealed_to_another_agent_fails_naming_the_path_and_touches_nothing(root: Path) -> None:
    _put(root, MANIFEST, OLD)
    key = _put(root, KEY, b"old key\n", 0o600)
    other = AgentIdentity.ephemeral()
    res = await _run_as(AgentIdentity.ephemeral(), Node(root),
                        _step(_inline(MANIFEST, NEW), _sealed(other, KEY, b"new key\n")))
    assert res.status == "Failed" and KEY in res.stderr and "cannot open sealed content" in res.stderr
    assert res.attempts == 1  # permanent: a retry opens nothing either
    assert key.read_bytes() == b"old key\n" and (root / MANIFEST.lstrip("/")).read_bytes() == OLD
