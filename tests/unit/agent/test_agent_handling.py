"""How one delivery is settled, with fake messages and a fake JetStream (no server): a stored
result is replayed and nothing runs; the result is stored and published before the ack; a
failed publish is not acked (so it comes back); foreign or malformed commands are refused
(reported on the agent's `refused` subject, terminated, nothing runs)."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from bke.contracts.agent import AgentCommand, CommandResult
from bke.contracts.agent_steps import RunProgram
from bke_agent import AgentIdentity, AgentLoop, AgentSettings, MemoryJournal, NullBackend
from tests.trust_helpers import signed, verifier

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class FakeMsg:
    def __init__(self, data: bytes, events: list[str], headers: dict[str, str] | None = None) -> None:
        self.data, self.events = data, events
        self.headers = headers  # a nats-py Msg's: None when the publisher sent none

    async def ack(self) -> None:
        self.events.append("ack")

    async def ack_sync(self, timeout: float = 1.0) -> None:  # the agent waits for the server's word
        self.events.append("ack")

    async def nak(self, delay: float | None = None) -> None:
        self.events.append("nak")

    async def term(self) -> None:
        self.events.append("term")

    async def in_progress(self) -> None:
        self.events.append("in_progress")


class FakeJS:
    def __init__(self, events: list[str], fail: bool = False) -> None:
        self.events, self.fail, self.published = events, fail, []

    async def publish(self, subject: str, payload: bytes, **kw: Any) -> None:
        if self.fail:
            raise ConnectionError("bus down")
        self.published.append((subject, payload))
        self.events.append(f"publish:{subject.rsplit('.', 1)[-1]}")


class RecordingJournal(MemoryJournal):
    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events

    def put(self, result: CommandResult, *, incarnation: str = "", expires_at: str = "") -> None:
        self.events.append("store")
        super().put(result, incarnation=incarnation, expires_at=expires_at)


def _loop(events: list[str], js: FakeJS, journal: MemoryJournal | None = None) -> tuple[AgentLoop, NullBackend]:
    backend = NullBackend()
    settings = AgentSettings(cluster="c1", node="n1", heartbeat_s=0, result_retry_s=0)
    loop = AgentLoop(None, js, settings, backend, journal or RecordingJournal(events),  # type: ignore[arg-type]
                     AgentIdentity.ephemeral(), verifier=verifier("c1", "n1"), now=lambda: NOW)
    return loop, backend


def _cmd(cid: str = "c1/node-env/n1/0", node: str = "n1") -> bytes:
    return signed(AgentCommand(command_id=cid, cluster="c1", node=node, phase="node-env", issued_at=NOW.isoformat(),
                               steps=[RunProgram(id="s", argv=["swapoff", "-a"])])).to_bytes()


async def test_store_then_publish_then_ack_and_replay_runs_nothing() -> None:
    events: list[str] = []
    js = FakeJS(events)
    loop, backend = _loop(events, js)
    await loop._on_msg(FakeMsg(_cmd(), events))  # type: ignore[arg-type]
    assert events == ["store", "publish:result", "ack"] and backend.steps_run == 1
    events.clear()
    await loop._on_msg(FakeMsg(_cmd(), events))  # type: ignore[arg-type]
    assert events == ["publish:result", "ack"] and backend.steps_run == 1
    first, again = (CommandResult.model_validate_json(p) for _, p in js.published)
    assert (first.replayed, again.replayed) == (False, True)
    assert again.model_copy(update={"replayed": False}) == first
    assert (loop.executed, loop.replayed) == (1, 1)


async def test_failed_publish_is_not_acked_and_the_retry_replays() -> None:
    events: list[str] = []
    js = FakeJS(events, fail=True)
    loop, backend = _loop(events, js)
    await loop._on_msg(FakeMsg(_cmd(), events))  # type: ignore[arg-type]
    assert events == ["store", "nak"]  # stored, not published, handed back
    js.fail = False
    events.clear()
    await loop._on_msg(FakeMsg(_cmd(), events))  # type: ignore[arg-type]
    assert events == ["publish:result", "ack"] and backend.steps_run == 1


async def test_foreign_and_malformed_commands_are_refused() -> None:
    events: list[str] = []
    loop, backend = _loop(events, FakeJS(events))
    await loop._on_msg(FakeMsg(_cmd(node="n2"), events))  # type: ignore[arg-type]
    await loop._on_msg(FakeMsg(b'{"commandId": 1}', events))  # type: ignore[arg-type]
    assert events == ["publish:refused", "term", "publish:refused", "term"] and backend.steps_run == 0
    assert loop.refused == 2


async def test_stopping_agent_hands_deliveries_back() -> None:
    events: list[str] = []
    loop, backend = _loop(events, FakeJS(events))
    loop._stopping = True
    await loop._on_msg(FakeMsg(_cmd(), events))  # type: ignore[arg-type]
    assert events == ["nak"] and backend.steps_run == 0


async def test_a_trace_is_told_each_command_and_result_with_their_sizes() -> None:
    """A fleet's trace (bke_agent.trace; bench/install.py's figures) hears a command's size as it
    comes and its result's as published; a refused command is received and never answered."""
    from bke_agent.trace import PhaseTrace

    events: list[str] = []
    js = FakeJS(events)
    loop, _ = _loop(events, js)
    loop.trace = trace = PhaseTrace(lambda: 0.0)
    body = _cmd()
    await loop._on_msg(FakeMsg(body, events))  # type: ignore[arg-type]
    [(_, result)] = js.published
    assert trace.phases["node-env"].by_node == {"n1": [(len(body), len(result))]}
    await loop._on_msg(FakeMsg(_cmd(node="n2"), events))  # type: ignore[arg-type]  # not this node's: refused
    assert trace.phases["node-env"].commands == 2 and trace.phases["node-env"].by_node == {"n1": [(len(body), len(result))]}
