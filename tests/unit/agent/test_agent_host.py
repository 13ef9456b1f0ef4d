"""The host backend under a temporary root: allow-list, modes and owners, argv-only programs,
systemctl through a fake `systemctl` on PATH, downloads checked by sha256."""
from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import stat
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import CheckHost, FetchFile, RemoveFile, RunProgram, Step, SystemdUnit, WriteFile
from bke_agent import AgentIdentity, Executor, HostBackend
from bke.contracts.agent import StepResult

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)
FAKE_SYSTEMCTL = """#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_SYSTEMCTL_LOG"
if [ "$2" = "broken.service" ]; then echo "Job for broken.service failed." >&2; exit 1; fi
exit 0
"""


@pytest.fixture
def host(tmp_path: Path) -> tuple[HostBackend, Path, Path]:
    root = tmp_path / "root"
    root.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "systemctl"
    fake.write_text(FAKE_SYSTEMCTL)
    fake.chmod(0o755)
    log = tmp_path / "systemctl.log"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "FAKE_SYSTEMCTL_LOG": str(log)}
    return HostBackend(root, env=env, systemctl=str(fake)), root, log


async def _run(backend: HostBackend, *steps: Step) -> list[StepResult]:
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t", steps=list(steps))
    return (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)).steps


def _write(path: str, data: bytes, mode: int = 0o644, owner: str = "root") -> WriteFile:
    return WriteFile(id=f"w:{path}", path=path, mode=mode, owner=owner, group=owner,
                     content_b64=base64.b64encode(data).decode(), sha256=hashlib.sha256(data).hexdigest())


async def test_allow_list_refusal_is_clear_and_writes_nothing(host: tuple[HostBackend, Path, Path]) -> None:
    backend, root, _ = host
    [res] = await _run(backend, _write("/etc/passwd", b"root::0:0::/:/bin/sh\n"))
    assert res.status == "Failed" and res.attempts == 1
    assert "/etc/passwd: outside the directories this agent may write" in res.stderr
    assert "/etc/kubernetes" in res.stderr
    assert not (root / "etc/passwd").exists()


async def test_write_applies_mode_and_owner_then_skips(host: tuple[HostBackend, Path, Path]) -> None:
    backend, root, _ = host
    step = _write("/etc/kubernetes/pki/ca.key", b"KEY", 0o600)
    [first] = await _run(backend, step)
    f = root / "etc/kubernetes/pki/ca.key"
    st = f.stat()
    assert first.status == "Succeeded" and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0 and st.st_gid == 0
    [second] = await _run(backend, step)
    assert second.status == "Skipped"
    [bad] = await _run(backend, _write("/etc/kubernetes/x.conf", b"x", owner="no-such-user-bke"))
    assert bad.status == "Failed" and "unknown user 'no-such-user-bke'" in bad.stderr


async def test_remove_is_idempotent(host: tuple[HostBackend, Path, Path]) -> None:
    backend, root, _ = host
    await _run(backend, _write("/etc/kubernetes/manifests/etcd.yaml", b"x"))
    steps = await _run(backend, RemoveFile(id="rm1", path="/etc/kubernetes/manifests/etcd.yaml"),
                       RemoveFile(id="rm2", path="/etc/kubernetes/manifests/etcd.yaml"))
    assert [s.status for s in steps] == ["Succeeded", "Skipped"]
    [refused] = await _run(backend, RemoveFile(id="rm3", path="/etc/hosts"))
    assert refused.status == "Failed"


TEST_PROGRAMS = {"echo": "test", "false": "test", "printenv": "test", "sh": "never, even if listed",
                 "python3": "never, even if listed"}


async def test_programs_run_from_argv_never_a_shell(host: tuple[HostBackend, Path, Path], tmp_path: Path) -> None:
    backend, _, _ = host
    backend.programs = TEST_PROGRAMS
    marker = tmp_path / "pwned"
    [res] = await _run(backend, RunProgram(id="echo", argv=["echo", f"a; touch {marker}", "$(id)"]))
    assert res.status == "Succeeded" and res.stdout == f"a; touch {marker} $(id)\n" and not marker.exists()
    [failed] = await _run(backend, RunProgram(id="false", argv=["false"]))
    assert failed.status == "Failed" and failed.exit_code == 1 and "exited with 1" in failed.stderr
    [ok1] = await _run(backend, RunProgram(id="ok1", argv=["false"], ok_exit_codes=[0, 1]))
    assert ok1.status == "Succeeded" and ok1.exit_code == 1
    [env] = await _run(backend, RunProgram(id="env", argv=["printenv", "BKE_X"], env={"BKE_X": "y"}))
    assert env.stdout == "y\n"


@pytest.mark.parametrize("argv,env,why", [
    (["/bin/sh", "-c", "id"], {}, "shells and interpreters are never run"),
    (["sh", "-c", "id"], {}, "shells and interpreters are never run"),
    (["bash", "-c", "id"], {}, "shells and interpreters are never run"),
    (["python3", "-c", "import os"], {}, "shells and interpreters are never run"),
    (["python3.11", "-c", "import os"], {}, "shells and interpreters are never run"),
    (["env", "sh", "-c", "id"], {}, "shells and interpreters are never run"),
    (["curl", "http://evil"], {}, "not a program this agent runs"),
    (["./echo", "x"], {}, "given by its path in"),
    (["/tmp/echo", "x"], {}, "given by its path in"),
    (["/usr/bin/../bin/echo", "x"], {}, "given by its path in"),
    (["echo", "x"], {"LD_PRELOAD": "/tmp/evil.so"}, "env LD_PRELOAD: may not be set"),
    (["echo", "x"], {"PATH": "/tmp"}, "env PATH: may not be set"),
    (["echo", "x"], {"BASH_ENV": "/tmp/x"}, "env BASH_ENV: may not be set"),
])
async def test_programs_outside_the_allow_list_are_refused(host: tuple[HostBackend, Path, Path], tmp_path: Path,
                                                           argv: list[str], env: dict[str, str], why: str) -> None:
    backend, _, _ = host
    backend.programs = TEST_PROGRAMS
    (tmp_path / "echo").write_text("#!/bin/sh\ntouch " + str(tmp_path / "pwned") + "\n")
    (tmp_path / "echo").chmod(0o755)
    [res] = await _run(backend, RunProgram(id="x", argv=argv, env=env, retries=3))
    assert res.status == "Failed" and res.attempts == 1 and why in res.stderr
    assert not (tmp_path / "pwned").exists()


async def test_the_default_allow_list_holds_no_shell_and_finds_programs_only_in_fixed_dirs(
        host: tuple[HostBackend, Path, Path]) -> None:
    from bke_agent.backends.programs import HOST_PROGRAMS, NEVER, PROGRAM_DIRS

    assert not set(HOST_PROGRAMS) & NEVER and all(why for why in HOST_PROGRAMS.values())
    assert all(d.startswith("/") and "tmp" not in d for d in PROGRAM_DIRS)
    backend, _, _ = host
    [res] = await _run(backend, RunProgram(id="echo", argv=["echo", "x"]))  # echo is not needed by any step
    assert res.status == "Failed" and "not a program this agent runs" in res.stderr


async def test_systemctl_through_the_fake(host: tuple[HostBackend, Path, Path]) -> None:
    backend, _, log = host
    steps = await _run(backend,
                       SystemdUnit(id="r", unit="", action="daemon-reload"),
                       SystemdUnit(id="e", unit="kubelet.service", action="enable-now"),
                       SystemdUnit(id="s", unit="containerd.service", action="restart"))
    assert [s.status for s in steps] == ["Succeeded"] * 3
    assert log.read_text().splitlines() == ["daemon-reload", "enable --now kubelet.service", "restart containerd.service"]
    [broken] = await _run(backend, SystemdUnit(id="b", unit="broken.service", action="start"))
    assert broken.status == "Failed" and broken.exit_code == 1 and "Job for broken.service failed." in broken.stderr
    [option] = await _run(backend, SystemdUnit(id="o", unit="--now", action="start"))
    assert option.status == "Failed" and "not a systemd unit name" in option.stderr


async def test_fetch_checks_sha256(tmp_path: Path) -> None:
    payload = b"\x7fELF pretend kubelet"
    good = hashlib.sha256(payload).hexdigest()
    hits: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        hits.append(request.url.path)
        return httpx.Response(200, content=payload) if request.url.path.endswith("/kubelet") else httpx.Response(404)

    root = tmp_path / "root"
    backend = HostBackend(root, http_transport=httpx.MockTransport(handler))
    url = "http://repo.example/kubelet/v1.33.2/linux/amd64/kubelet"
    steps = await _run(backend, FetchFile(id="f1", url=url, path="/usr/bin/kubelet", sha256=good),
                       FetchFile(id="f2", url=url, path="/usr/bin/kubelet", sha256=good))
    assert [s.status for s in steps] == ["Succeeded", "Skipped"] and len(hits) == 1
    f = root / "usr/bin/kubelet"
    assert f.read_bytes() == payload and stat.S_IMODE(f.stat().st_mode) == 0o755
    [bad] = await _run(backend, FetchFile(id="f3", url=url, path="/usr/bin/kubectl", sha256="1" * 64))
    assert bad.status == "Failed" and "does not match the expected" in bad.stderr
    assert not (root / "usr/bin/kubectl").exists() and not list((root / "usr/bin").glob(".*tmp"))
    [missing] = await _run(backend, FetchFile(id="f4", url=url + "x", path="/usr/bin/kubectl", sha256=good))
    assert missing.status == "Failed" and "HTTP 404" in missing.stderr


async def test_check_host(host: tuple[HostBackend, Path, Path]) -> None:
    backend, root, _ = host
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('ID=debian\nPRETTY_NAME="Debian GNU/Linux 12"\n')
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        [res] = await _run(backend, CheckHost(id="pre", checks=["os", "time", "ports-free"], ports=[port]))
    assert res.status == "Failed" and f"port(s) in use on 0.0.0.0: {port}" in res.stderr
    assert "ok os: Debian GNU/Linux 12" in res.stdout and "ok time" in res.stdout
    [ok] = await _run(backend, CheckHost(id="pre2", checks=["os", "time"]))
    assert ok.status == "Succeeded", json.dumps(ok.model_dump())


async def test_restart_static_pod_moves_the_manifest_out_until_the_pod_is_gone(host, tmp_path: Path) -> None:
    import asyncio

    from bke.contracts.agent_steps import RestartStaticPod

    backend, root, _ = host
    manifests = root / "etc/kubernetes/manifests"
    manifests.mkdir(parents=True)
    manifest = manifests / "kube-scheduler.yaml"
    manifest.write_text("pod\n")
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    gone_url = f"http://127.0.0.1:{dead.getsockname()[1]}/healthz"  # bound, not listening: refused
    step = RestartStaticPod(id="restart:kube-scheduler", manifest="/etc/kubernetes/manifests/kube-scheduler.yaml",
                            health_url=gone_url, timeout_s=10)
    [ok] = await _run(backend, step)
    assert ok.status == "Succeeded" and manifest.read_text() == "pod\n"
    assert not any((root / "etc/kubernetes/.bke-restart").iterdir())
    # an attempt interrupted after the first move finds the manifest in the stash and finishes
    os.replace(manifest, root / "etc/kubernetes/.bke-restart/kube-scheduler.yaml")
    [resumed] = await _run(backend, step)
    assert resumed.status == "Succeeded" and manifest.read_text() == "pod\n"

    # a pod that keeps accepting connections (no kubelet): the step fails and the manifest is put
    # back (the agent only connects: it sends no request and reads no answer)
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        alive = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/healthz"
        [stuck] = await _run(backend, step.model_copy(update={"health_url": alive, "timeout_s": 6.0}))
    finally:
        server.close()
    assert stuck.status == "Failed" and "still accepts connections" in stuck.stderr and manifest.read_text() == "pod\n"
    manifest.unlink()
    [none] = await _run(backend, step)
    assert none.status == "Failed" and "no such static pod manifest" in none.stderr
    dead.close()
