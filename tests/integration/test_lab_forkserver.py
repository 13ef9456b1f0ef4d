"""The lab's fork server (bke.lab.forkserver) and the launcher's forked agent
(bke_agent.forked): a forked program starts as a fresh one would, a request it cannot run is
refused without stopping it, a dead child is reaped, `BKE_LAB_FORKSERVER=0` starts fresh
interpreters, and an agent forked from a launcher that holds its code runs, answers a signal and
reports its exit status. Real processes throughout; the e2e labs start every service and agent
through it."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from bke.adapters.runtime.processes import _CHILDREN, pid_alive, poll_until, stop_pid
from bke.lab import forkserver

pytestmark = pytest.mark.integration

# what the probe program reports about itself, once started
PROBE = textwrap.dedent('''
    import json, os, signal, sys
    fds = sorted(int(fd) for fd in os.listdir("/proc/self/fd"))
    report = {
        "pid": os.getpid(), "sid": os.getsid(0), "argv": sys.argv[1:], "cwd": os.getcwd(),
        "env": dict(os.environ), "fds": fds, "stdin": os.readlink("/proc/self/fd/0"),
        "stdout": os.readlink("/proc/self/fd/1"),
        "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
        "sigchld_default": signal.getsignal(signal.SIGCHLD) == signal.SIG_DFL,
        "main": __name__, "comm": open("/proc/self/comm").read().strip(),
    }
    print("probe started", flush=True)
    with open(os.environ["PROBE_OUT"] + ".tmp", "w") as f:
        json.dump(report, f)
    os.rename(os.environ["PROBE_OUT"] + ".tmp", os.environ["PROBE_OUT"])
    if sys.argv[1:2] == ["wait"]:
        signal.pause()
''')


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A work directory with a running fork server that can also import the probe module."""
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "bke_fs_probe.py").write_text(PROBE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "probe"))
    monkeypatch.delenv(forkserver.ENABLE_ENV, raising=False)
    workdir = tmp_path / "lab"
    workdir.mkdir()
    forkserver.ensure_server(workdir)
    yield workdir
    forkserver.stop_server(workdir)


def _report(path: Path) -> dict[str, object]:
    return poll_until(lambda: json.loads(path.read_text()) if path.exists() else None, timeout=30,
                      what="the probe's report")  # type: ignore[no-any-return]


def test_a_forked_program_starts_as_a_fresh_one_would(server: Path, tmp_path: Path) -> None:
    out, log, cwd = tmp_path / "report.json", tmp_path / "logs" / "probe.log", tmp_path / "somewhere"
    cwd.mkdir()
    env = {"PROBE_OUT": str(out), "ONLY": "this"}
    pid = forkserver.request_spawn(server, [sys.executable, "-m", "bke_fs_probe", "a", "b"], env, log, cwd=cwd)
    got = _report(out)
    assert got["pid"] == pid
    assert got["sid"] == pid  # a session of its own, as start_new_session gives
    assert got["env"] == env  # exactly what it was given: nothing of the server's or the caller's
    assert got["argv"] == ["a", "b"] and got["main"] == "__main__"
    assert got["comm"] == "bke_fs_probe"  # named after what it runs, not the fork server
    assert got["cwd"] == str(cwd)
    assert got["fds"] == [0, 1, 2, 3]  # 3: the listing's own; the server's socket not inherited
    assert got["stdin"] == os.devnull and got["stdout"] == str(log)
    assert got["sigterm_default"] and got["sigchld_default"]
    assert "probe started" in log.read_text()
    assert log.stat().st_mode & 0o777 == 0o600
    # exited: reaped at once (no zombie), so a PID check sees it gone
    poll_until(lambda: True if not pid_alive(pid) else None, timeout=10, what="the probe's exit")


def test_what_it_cannot_run_is_refused_and_it_keeps_serving(server: Path, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="not a BKE program: /bin/true"):
        forkserver.request_spawn(server, ["/bin/true"], {}, tmp_path / "true.log")
    pip = str(Path(sys.executable).parent / "pip")  # a console script of the venv, not ours
    with pytest.raises(RuntimeError, match="not a BKE program"):
        forkserver.request_spawn(server, [pip, "--version"], {}, tmp_path / "pip.log")
    assert forkserver.entry_point([str(Path(sys.executable).parent / "bke-dispatcher")]) == ("bke_dispatcher.main", "main")
    with pytest.raises(RuntimeError, match="ModuleNotFoundError"):
        forkserver.request_spawn(server, [sys.executable, "-m", "no_such_module_here"], {}, tmp_path / "x.log")
    # still serving; and a child that waits is stopped by its PID like any other
    out = tmp_path / "report.json"
    pid = forkserver.request_spawn(server, [sys.executable, "-m", "bke_fs_probe", "wait"], {"PROBE_OUT": str(out)},
                                   tmp_path / "probe.log")
    assert _report(out)["pid"] == pid and pid_alive(pid)
    assert stop_pid(pid, 10.0) and not pid_alive(pid)


def test_spawn_forks_through_the_server_and_falls_back_to_a_fresh_interpreter(
        server: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server_pid = int((server / forkserver.PID_FILE).read_text())
    out = tmp_path / "forked.json"
    pid = forkserver.spawn(server, "probe", [sys.executable, "-m", "bke_fs_probe"], tmp_path / "a.log",
                           {"PROBE_OUT": str(out), "PYTHONPATH": str(tmp_path / "probe")})
    _report(out)
    assert Path(f"/proc/{server_pid}").exists() and pid not in _CHILDREN  # the server's child, not ours
    assert forkserver.ensure_server(server) == server_pid  # the one running is kept

    monkeypatch.setenv(forkserver.ENABLE_ENV, "0")
    out = tmp_path / "fresh.json"
    pid = forkserver.spawn(server, "probe", [sys.executable, "-m", "bke_fs_probe"], tmp_path / "b.log",
                           {"PROBE_OUT": str(out), "PYTHONPATH": str(tmp_path / "probe")})
    _report(out)
    assert pid in _CHILDREN  # started by this process, as ManagedProcess does
    poll_until(lambda: True if not pid_alive(pid) else None, timeout=10, what="the probe's exit")


def test_a_stopped_server_is_started_again_on_the_next_spawn(server: Path, tmp_path: Path) -> None:
    first = int((server / forkserver.PID_FILE).read_text())
    assert forkserver.stop_server(server) == [first] and not pid_alive(first)
    out = tmp_path / "report.json"
    forkserver.spawn(server, "probe", [sys.executable, "-m", "bke_fs_probe"], tmp_path / "a.log",
                     {"PROBE_OUT": str(out)})
    _report(out)
    assert int((server / forkserver.PID_FILE).read_text()) != first


# A launcher's process that holds the agent's code: the agent is forked, not executed
FORKED_AGENT = textwrap.dedent('''
    import json, os, signal, sys
    import bke_agent.main
    from bke_agent.forked import ForkedAgent, holds_agent_code
    assert holds_agent_code(sys.prefix) and not holds_agent_code("/some/other/venv")
    env = dict(os.environ)
    init = ForkedAgent(["init"], env, before=lambda: None)
    init_code = init.wait(60)
    run = ForkedAgent(["run"], env, before=lambda: None)
    alive = run.poll() is None
    run.terminate()
    run_code = run.wait(60)
    print(json.dumps({"init": init_code, "run": run_code, "alive": alive}))
''')


def test_an_agent_forked_by_a_launcher_holding_its_code_runs_and_stops_on_sigterm(tmp_path: Path) -> None:
    env = dict(os.environ, BKE_AGENT_CLUSTER="c1", BKE_AGENT_NODE="n1", BKE_AGENT_BACKEND="lab",
               BKE_AGENT_ROOT=str(tmp_path / "root"), BKE_AGENT_STATE_DIR=str(tmp_path / "state"),
               BKE_NATS_URL="nats://127.0.0.1:1")  # no NATS: `run` keeps trying until stopped
    done = subprocess.run([sys.executable, "-c", FORKED_AGENT], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["init"] == 0 and "bke-agent-x25519 " in done.stdout  # init printed its public key
    assert got["alive"] and got["run"] in (0, -signal.SIGTERM), got
