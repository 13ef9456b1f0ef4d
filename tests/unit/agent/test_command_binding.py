"""Commands bound to their receiver (bke.core.secrets.binding): the rules as a table, the agent
loop's answer to each (refused and reported, nothing runs), what the agent remembers, the
journal kept per incarnation and pruned by each command's validity, and the signer's choice."""
from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bke.contracts.agent import (
    AgentCommand,
    AgentRuntime,
    COMMAND_VALIDITY_S,
    CommandRefused,
    CommandResult,
    StepResult,
)
from bke.contracts.agent_steps import RunProgram
from bke.core.secrets.binding import (
    AGENT_COMMAND_FORM, COMMAND_BINDING, OPERATION_REFS, Binding, Served, binding_for, new_incarnation, newer_incarnation, receiver_refusal, result_refusal,
    served_after, unbound_refusal,
)
from bke.core.secrets.signing import sign_command, signed_command_bytes
from bke_agent import AgentIdentity, AgentLoop, AgentSettings, DiskJournal, DiskServed, MemoryJournal, MemoryServed, NullBackend
from bke_agent.binding import SERVED_FILE
from bke_agent.hostfacts import agent_runtime
from bke_agent.journal import EXPIRED_KEPT_S
from tests.trust_helpers import SIGNER, verifier
from tests.unit.agent.test_agent_handling import FakeJS, FakeMsg

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=timezone.utc)
ME, OLD_KEY = "a" * 32, "b" * 32
I1 = new_incarnation(NOW - timedelta(days=30), "1" * 16)
I2 = new_incarnation(NOW - timedelta(days=1), "2" * 16)


def _cmd(cid: str = "c1/node-env/n1/0", agent_id: str | None = ME, incarnation: str | None = I2,
         issued: datetime = NOW) -> AgentCommand:
    return AgentCommand(command_id=cid, cluster="c1", node="n1", phase="node-env", issued_at=issued.isoformat(),
                        steps=[RunProgram(id="s", argv=["swapoff", "-a"])], agent_id=agent_id, incarnation=incarnation)


# incarnations ------------------------------------------------------------------------------------
def test_an_incarnation_is_ordered_by_when_it_was_made() -> None:
    assert I2.startswith("20260531T120000000000Z-") and len(I2) == 39
    assert newer_incarnation(I2, I1) and not newer_incarnation(I1, I2) and not newer_incarnation(I2, I2)
    assert newer_incarnation(I1, "") and not newer_incarnation("", I1)  # "": planned before incarnations
    twin = new_incarnation(NOW - timedelta(days=1), "3" * 16)  # the same microsecond: neither is newer
    assert not newer_incarnation(twin, I2) and not newer_incarnation(I2, twin)
    with pytest.raises(ValueError, match="16 hex"):
        new_incarnation(NOW, "not-hex")


# the signer's choice -----------------------------------------------------------------------------
def test_the_signer_binds_unless_no_key_was_provisioned_or_the_agent_reads_no_binding() -> None:
    assert binding_for(ME, I1, None) == Binding(ME, I1)  # no runtime recorded: bound
    assert binding_for(ME, I1, COMMAND_BINDING) == Binding(ME, I1)
    assert binding_for(ME, None, None) == Binding(ME, "")  # a cluster planned before incarnations
    assert binding_for(ME, I1, 0) is None  # an agent of the previous release: a bound body is malformed to it
    assert binding_for(None, I1, None) is None  # nothing provisioned for the node: nothing to bind to
    # what this agent's heartbeats say: binding, and the operation refs (OPERATION_REFS) besides
    assert agent_runtime("0.1.0").command_binding == AGENT_COMMAND_FORM == OPERATION_REFS > COMMAND_BINDING
    assert AgentRuntime.model_validate({"agentVersion": "0.1.0", "python": "3.11", "machine": "x"}).command_binding == 0


def test_the_binding_is_signed_and_absent_from_an_unbound_body() -> None:
    bound = sign_command(_cmd(agent_id=None, incarnation=None), SIGNER, binding=Binding(ME, I2))
    assert (bound.agent_id, bound.incarnation) == (ME, I2)
    assert signed_command_bytes(_cmd(agent_id=None, incarnation=None), SIGNER, binding=Binding(ME, I2)) \
        == signed_command_bytes(bound, SIGNER)
    v = verifier("c1", "n1")
    assert v.authentic(bound) is None
    for field, value in (("agent_id", OLD_KEY), ("incarnation", I1)):
        assert v.authentic(bound.model_copy(update={field: value})) == "bad signature"
    unbound = _cmd(agent_id=None, incarnation=None).to_bytes()
    assert b"agentId" not in unbound and b"incarnation" not in unbound  # what an agent of the previous release reads
    assert AgentCommand.model_validate_json(bound.to_bytes()) == bound


# the agent's rules --------------------------------------------------------------------------------
RECEIVER_CASES = [
    ("unbound: decided after the journal", _cmd(agent_id=None, incarnation=None), Served(ME, I2), None),
    ("another key of this node", _cmd(agent_id=OLD_KEY), None, "bound to agent key " + OLD_KEY),
    ("first bound command", _cmd(), None, None),
    ("the incarnation it serves", _cmd(), Served(ME, I2), None),
    ("a cluster made again", _cmd(incarnation=I2), Served(ME, I1), None),
    ("a deleted cluster of the same name", _cmd(incarnation=I1), Served(ME, I2), "a deleted cluster of the same name"),
    ("planned before incarnations, after one", _cmd(incarnation=""), Served(ME, I1), "for incarnation (none)"),
    ("remembered with the previous key", _cmd(incarnation=I1), Served(OLD_KEY, I2), None),
]


@pytest.mark.parametrize("cmd,served,reason", [c[1:] for c in RECEIVER_CASES], ids=[c[0] for c in RECEIVER_CASES])
def test_receiver_table(cmd: AgentCommand, served: Served | None, reason: str | None) -> None:
    why = receiver_refusal(cmd, ME, served)
    assert why is None if reason is None else (why is not None and reason in why), why


MADE = NOW - timedelta(hours=1)  # this agent's key
UNBOUND_CASES = [
    ("bound: decided before", _cmd(), Served(ME, I2), MADE, None),
    ("never took a bound one", _cmd(agent_id=None, incarnation=None), None, MADE, None),
    ("took a bound one", _cmd(agent_id=None, incarnation=None), Served(ME, I2), MADE, "takes only bound commands"),
    ("took one with its previous key", _cmd(agent_id=None, incarnation=None), Served(OLD_KEY, I2), MADE, None),
    ("issued before the key was made", _cmd(agent_id=None, incarnation=None, issued=MADE - timedelta(hours=1)), None,
     MADE, "before this agent's key was made"),
    ("within the clock skew of it", _cmd(agent_id=None, incarnation=None, issued=MADE - timedelta(minutes=2)), None,
     MADE, None),
    ("a key kept in memory", _cmd(agent_id=None, incarnation=None, issued=MADE - timedelta(days=1)), None, None, None),
]


@pytest.mark.parametrize("cmd,served,made,reason", [c[1:] for c in UNBOUND_CASES], ids=[c[0] for c in UNBOUND_CASES])
def test_unbound_table(cmd: AgentCommand, served: Served | None, made: datetime | None, reason: str | None) -> None:
    why = unbound_refusal(cmd, ME, served, made)
    assert why is None if reason is None else (why is not None and reason in why), why


def test_what_the_agent_remembers() -> None:
    assert served_after(_cmd(), ME, None) == Served(ME, I2)
    assert served_after(_cmd(), ME, Served(ME, I2)) is None  # unchanged: nothing written
    assert served_after(_cmd(incarnation=I2), ME, Served(ME, I1)) == Served(ME, I2)
    assert served_after(_cmd(), ME, Served(OLD_KEY, I2)) == Served(ME, I2)  # a new key starts afresh
    assert served_after(_cmd(agent_id=None, incarnation=None), ME, None) is None


def test_the_memory_survives_a_restart_and_an_unreadable_one_is_none(tmp_path: Path) -> None:
    one = DiskServed(tmp_path)
    assert one.load() is None
    one.save(Served(ME, I2))
    assert DiskServed(tmp_path).load() == Served(ME, I2)
    assert (tmp_path / SERVED_FILE).stat().st_mode & 0o777 == 0o600
    (tmp_path / SERVED_FILE).write_text("{not json")
    assert DiskServed(tmp_path).load() is None


# the loop -----------------------------------------------------------------------------------------
def _loop(events: list[str], js: FakeJS, identity: AgentIdentity, journal: MemoryJournal | DiskJournal | None = None,
          served: MemoryServed | None = None) -> tuple[AgentLoop, NullBackend]:
    backend = NullBackend()
    loop = AgentLoop(None, js, AgentSettings(cluster="c1", node="n1", heartbeat_s=0, result_retry_s=0),  # type: ignore[arg-type]
                     backend, journal or MemoryJournal(), identity, verifier=verifier("c1", "n1"), now=lambda: NOW,
                     served=served or MemoryServed())
    return loop, backend


def _body(cmd: AgentCommand, identity: AgentIdentity | None = None, incarnation: str = I2) -> bytes:
    binding = Binding(identity.agent_id, incarnation) if identity is not None else None
    return signed_command_bytes(cmd.model_copy(update={"agent_id": None, "incarnation": None}), SIGNER, binding=binding)


def _refusals(js: FakeJS) -> list[str]:
    return [CommandRefused.model_validate_json(b).reason for s, b in js.published if s.endswith(".refused")]


async def test_a_command_for_the_previous_key_is_refused_even_when_the_journal_holds_it() -> None:
    events: list[str] = []
    js, journal = FakeJS(events), MemoryJournal()
    old, new = AgentIdentity.ephemeral(), AgentIdentity.ephemeral()
    captured = _body(_cmd(), old)
    first, backend = _loop(events, js, old, journal)
    await first._on_msg(FakeMsg(captured, events))  # type: ignore[arg-type]
    assert backend.steps_run == 1
    # the node is provisioned again (a new key); its journal survived
    again, backend = _loop(events, js, new, journal)
    await again._on_msg(FakeMsg(captured, events))  # type: ignore[arg-type]
    assert backend.steps_run == 0 and again.replayed == 0 and again.refused == 1
    assert f"bound to agent key {old.agent_id}, not this agent's {new.agent_id}" in _refusals(js)[0]
    await again._on_msg(FakeMsg(_body(_cmd("c1/node-env/n1/1"), new), events))  # type: ignore[arg-type]
    assert backend.steps_run == 1  # the positive control: a fresh command for the new key runs


async def test_a_re_created_cluster_runs_its_own_commands_and_refuses_the_deleted_ones() -> None:
    events: list[str] = []
    js = FakeJS(events)
    me = AgentIdentity.ephemeral()
    served = MemoryServed()
    loop, backend = _loop(events, js, me, served=served)
    old = _body(_cmd(), me, I1)
    await loop._on_msg(FakeMsg(old, events))  # type: ignore[arg-type]
    assert backend.steps_run == 1 and served.load() == Served(me.agent_id, I1)
    # the same command id in the cluster made again: it runs, not answered with the old result
    await loop._on_msg(FakeMsg(_body(_cmd(), me, I2), events))  # type: ignore[arg-type]
    assert backend.steps_run == 2 and loop.replayed == 0 and served.load() == Served(me.agent_id, I2)
    # the deleted cluster's command again: refused, not even answered from the journal
    await loop._on_msg(FakeMsg(old, events))  # type: ignore[arg-type]
    assert backend.steps_run == 2 and loop.replayed == 0 and loop.refused == 1
    assert "a deleted cluster of the same name" in _refusals(js)[0]
    # a redelivery of the current one is still answered from the journal
    await loop._on_msg(FakeMsg(_body(_cmd(), me, I2), events))  # type: ignore[arg-type]
    assert backend.steps_run == 2 and loop.replayed == 1
    # each answer names the incarnation of the command it answers, the replayed one too
    answers = [CommandResult.model_validate_json(b) for s, b in js.published if s.endswith(".result")]
    assert [(r.incarnation, r.replayed) for r in answers] == [(I1, False), (I2, False), (I2, True)]


async def test_a_replay_answered_before_the_new_cluster_reached_the_agent_names_the_old_incarnation() -> None:
    """The gap binding leaves (bke.core.secrets.binding): the deleted cluster's command, replayed
    before the new cluster's first command reaches the agent, is answered from the journal;
    its answer says which incarnation it belongs to, so the new install does not count it."""
    events: list[str] = []
    js = FakeJS(events)
    me = AgentIdentity.ephemeral()
    loop, backend = _loop(events, js, me)
    old = _body(_cmd(), me, I1)
    await loop._on_msg(FakeMsg(old, events))  # type: ignore[arg-type]
    await loop._on_msg(FakeMsg(old, events))  # type: ignore[arg-type]
    first, replay = (CommandResult.model_validate_json(b) for s, b in js.published if s.endswith(".result"))
    assert backend.steps_run == 1 and replay.replayed and replay.incarnation == first.incarnation == I1
    assert result_refusal(replay.incarnation, I2) == (f"it answers a command of incarnation {I1} of its cluster, "
                                                      f"not the current {I2}")


def test_a_result_is_judged_by_the_incarnation_it_names() -> None:
    assert result_refusal(I2, I2) is None and result_refusal("", "") is None
    assert result_refusal(None, I2) is None  # an unbound command's answer, or an agent before the field
    assert result_refusal(I1, I2) and result_refusal(I2, None) and result_refusal("", I2)
    assert "not the current (no plan)" in (result_refusal(I1, None) or "")


def test_an_unbound_answer_keeps_the_previous_body() -> None:
    """As the binding's fields are: left out when unset, so a reader of the previous release
    reads an answer to an unbound command (the only kind it sends)."""
    res = _result("c1/node-env/n1/0")
    assert b"incarnation" not in res.to_bytes()
    bound = res.model_copy(update={"incarnation": I2})
    assert CommandResult.model_validate_json(bound.to_bytes()).incarnation == I2


async def test_an_unbound_command_runs_until_a_bound_one_did_but_is_answered_after() -> None:
    events: list[str] = []
    js = FakeJS(events)
    me = AgentIdentity.ephemeral()
    loop, backend = _loop(events, js, me)
    legacy = _body(_cmd())  # a signer that does not bind yet (this agent was just updated)
    await loop._on_msg(FakeMsg(legacy, events))  # type: ignore[arg-type]
    await loop._on_msg(FakeMsg(_body(_cmd("c1/node-env/n1/1"), me), events))  # type: ignore[arg-type]
    assert backend.steps_run == 2
    await loop._on_msg(FakeMsg(legacy, events))  # type: ignore[arg-type]
    assert loop.replayed == 1  # the redelivery of one it ran: answered
    await loop._on_msg(FakeMsg(_body(_cmd("c1/node-env/n1/2")), events))  # type: ignore[arg-type]
    assert backend.steps_run == 2 and "takes only bound commands" in _refusals(js)[0]


async def test_an_unbound_command_issued_before_the_key_was_made_is_refused(tmp_path: Path) -> None:
    events: list[str] = []
    js = FakeJS(events)
    me, _ = AgentIdentity.load_or_create(tmp_path)
    os.utime(tmp_path / "agent.key", (NOW.timestamp(), NOW.timestamp()))
    me = AgentIdentity.load(tmp_path)
    assert me.made_at == NOW
    loop, backend = _loop(events, js, me)
    await loop._on_msg(FakeMsg(_body(_cmd(issued=NOW - timedelta(days=2))), events))  # type: ignore[arg-type]
    assert backend.steps_run == 0 and "before this agent's key was made" in _refusals(js)[0]


# the journal --------------------------------------------------------------------------------------
def _result(cid: str) -> CommandResult:
    return CommandResult(command_id=cid, cluster="c1", node="n1", agent_id="x", status="Succeeded",
                         steps=[StepResult(id="s", status="Succeeded")], started_at="t0", finished_at="t1")


def test_the_journal_keeps_each_incarnation_apart(tmp_path: Path) -> None:
    for j in (DiskJournal(tmp_path), MemoryJournal()):
        j.put(_result("c1/node-env/n1/0"), incarnation=I1, expires_at=NOW.isoformat())
        assert j.get("c1/node-env/n1/0", I1) is not None
        assert j.get("c1/node-env/n1/0", I2) is None and j.get("c1/node-env/n1/0") is None


def test_the_journal_prunes_by_each_commands_validity(tmp_path: Path) -> None:
    j = DiskJournal(tmp_path, keep_days=0.001)  # a short keep does not cut a valid command's result
    at = NOW.timestamp()
    expired = NOW - timedelta(seconds=EXPIRED_KEPT_S + 60)
    j.put(_result("gone"), expires_at=expired.isoformat())
    j.put(_result("kept"), expires_at=(NOW + timedelta(days=6)).isoformat())
    j.put(_result("just-expired"), expires_at=(NOW - timedelta(hours=1)).isoformat())
    bare = j._path("bare")  # a result stored before entries named their expiry
    bare.write_bytes(_result("bare").to_bytes())
    os.utime(bare, (at - COMMAND_VALIDITY_S - EXPIRED_KEPT_S + 60,) * 2)  # within validity + a day: kept
    assert j.prune(now=at) == 1
    assert j.get("gone") is None and j.get("kept") and j.get("just-expired") and j.get("bare")
    os.utime(bare, (at - COMMAND_VALIDITY_S - EXPIRED_KEPT_S - 60,) * 2)
    assert j.prune(now=at) == 1 and j.get("bare") is None


async def test_a_replay_after_pruning_is_refused(tmp_path: Path) -> None:
    events: list[str] = []
    js = FakeJS(events)
    me = AgentIdentity.ephemeral()
    journal = DiskJournal(tmp_path, fsync=False)
    loop, backend = _loop(events, js, me, journal)
    body = _body(_cmd(), me)
    await loop._on_msg(FakeMsg(body, events))  # type: ignore[arg-type]
    expires = datetime.fromisoformat(AgentCommand.model_validate_json(body).expires_at)
    later = expires + timedelta(seconds=EXPIRED_KEPT_S + 1)
    assert journal.prune(now=later.timestamp()) == 1 and journal.get("c1/node-env/n1/0", I2) is None
    loop.now = lambda: later  # type: ignore[method-assign]
    await loop._on_msg(FakeMsg(body, events))  # type: ignore[arg-type]
    assert backend.steps_run == 1 and "expired at" in _refusals(js)[0]


def test_a_result_of_another_incarnation_is_counted_on_the_services_metrics(caplog) -> None:
    import logging

    from bke.adapters.bus.other_incarnation import METRIC, OtherIncarnation
    from bke.adapters.http.metrics import ServiceMetrics

    metrics = ServiceMetrics("upgrader")
    counter = OtherIncarnation(metrics, "upgrader")
    caplog.set_level(logging.WARNING, logger="bke.adapters.bus.other_incarnation")
    res = _result("c1/node-env/n1/0").model_copy(update={"incarnation": I1})
    counter.dropped(res, "why")
    counter.dropped(res, "why", log_it=False)  # its caller logs it
    assert metrics.sample(f"{METRIC}_total", {"service": "upgrader"}) == 2.0 and counter.count == 2
    [line] = [r for r in caplog.records if r.name == "bke.adapters.bus.other_incarnation"]
    assert (line.cluster, line.node, line.incarnation) == ("c1", "n1", I1)  # type: ignore[attr-defined]
