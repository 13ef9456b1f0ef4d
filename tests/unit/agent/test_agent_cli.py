"""`bke-agent init` prints one line (what `bke agent bootstrap` reads back) and nothing else
on stdout; bad configuration exits 2 with a message naming the variable; the public surface
is what `__all__` says."""
from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

import bke_agent
from bke_agent.main import main
from bke_agent.settings import AgentSettings


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """`main` installs the service's log handler on the root logger; put pytest's back."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_init_prints_the_public_key_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("BKE_AGENT_CLUSTER", "c1")
    monkeypatch.setenv("BKE_AGENT_NODE", "n1")
    monkeypatch.setenv("BKE_AGENT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("BKE_NATS_URL", raising=False)  # init needs no bus
    assert main(["init"]) == 0
    first = capsys.readouterr().out
    assert main(["init"]) == 0
    assert capsys.readouterr().out == first  # the same key: made once
    assert first.count("\n") == 1 and first.startswith("bke-agent-x25519 ")
    assert ((tmp_path / "state/agent.key").stat().st_mode & 0o777) == 0o600


def test_bad_configuration_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("BKE_AGENT_CLUSTER", raising=False)
    monkeypatch.setenv("BKE_AGENT_NODE", "n1")
    assert main(["init"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and "BKE_AGENT_CLUSTER" in out.err
    monkeypatch.setenv("BKE_AGENT_CLUSTER", "c1")
    monkeypatch.setenv("BKE_AGENT_BACKEND", "lab")
    monkeypatch.delenv("BKE_AGENT_ROOT", raising=False)
    assert main(["run"]) == 2
    assert "needs BKE_AGENT_ROOT" in capsys.readouterr().err


def test_state_dir_defaults() -> None:
    host = AgentSettings(cluster="c", node="n")
    lab = AgentSettings(cluster="c", node="n", backend="lab", root=Path("/tmp/x/hosts/n"), ip="127.0.0.9")
    assert host.state_path == Path("/var/lib/bke-agent")
    assert lab.state_path == Path("/tmp/x/hosts/n/var/lib/bke-agent")


def test_public_surface() -> None:
    assert sorted(bke_agent.__all__) == bke_agent.__all__
    for name in bke_agent.__all__:
        assert getattr(bke_agent, name) is not None
