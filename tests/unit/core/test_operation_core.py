"""The operations' shared frame, pure (bke.core.operation): a record's JSON form keeps its kind's
version and reads its statuses back as enums, an answer settles only the command in flight,
and the recorded answers parse into agents' and services' answers."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from bke.contracts.agent import CommandResult, StepResult
from bke.core.operation import (
    Answer, Answers, Fail, OperationRecord, OperationStatus, RunLocally, RunStatus, Send, ServiceAnswer, StepRun, Wait,
    fold, in_flight, settle,
)
from bke.core.state.schema import SCHEMA_FIELD, StoredVersionTooNew, record_kind


@dataclass(kw_only=True)
class Toy(OperationRecord):
    KIND = "rotation"  # a kind the schema knows
    nodes: list[StepRun]

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "Toy":
        return cls(**{**doc, "nodes": [StepRun(**n) for n in doc["nodes"]]})


def toy() -> Toy:
    return Toy(request_id="r1", cluster="c", started_at="t0",
               nodes=[StepRun(hostname=h, command_id=f"c/toy@r1/{h}/0") for h in ("a", "b")])


def apply(rec: Toy, cid: str, status: str, step: str, stderr: str) -> bool:
    run = in_flight(rec.nodes, cid)
    if run is None:
        return False
    settle(run, Answer(status, step, stderr))
    return True


def test_a_record_round_trips_with_its_kinds_version_and_enum_statuses():
    rec = toy()
    rec.nodes[0].status = RunStatus.RUNNING
    doc = json.loads(rec.to_json())
    assert doc[SCHEMA_FIELD] == record_kind("rotation").current and doc["status"] == "Running"
    assert doc["nodes"][0]["status"] == "Running"
    back = Toy.from_json(rec.to_json())
    assert back == rec and back.status is OperationStatus.RUNNING and back.nodes[1].status is RunStatus.PENDING
    assert back.running
    back.finish(OperationStatus.FAILED, "why", "t1")
    assert (back.running, back.message, back.finished_at) == (False, "why", "t1")


def test_a_newer_form_is_refused_naming_the_record():
    doc = json.loads(toy().to_json())
    doc[SCHEMA_FIELD] += 1
    with pytest.raises(StoredVersionTooNew, match="the rotation record of c"):
        Toy.from_json(json.dumps(doc))


def test_an_answer_settles_only_the_command_in_flight_and_keeps_the_end_of_the_output():
    rec = toy()
    rec.nodes[0].status = RunStatus.RUNNING
    answers = {"c/toy@r1/a/0": Answer("Failed", "health", "x" * 3000), "c/toy@r1/b/0": Answer("Succeeded"),
               "c/toy@other/a/0": Answer("Succeeded")}
    assert fold(rec, answers, apply)  # only a's: b was never sent, the last is another operation's
    a, b = rec.nodes
    assert (a.status, a.step, len(a.stderr)) == (RunStatus.FAILED, "health", 2000)
    assert b.status is RunStatus.PENDING
    assert not fold(rec, answers, apply)  # folded again: nothing in flight takes it


def test_a_result_becomes_the_answer_of_its_failed_step():
    def res(status: str, steps: list[StepResult]) -> CommandResult:
        return CommandResult(command_id="c/x@r/a/0", cluster="c", node="a", agent_id="g", status=status, steps=steps,
                             started_at="t", finished_at="t")

    ok = res("Succeeded", [StepResult(id="s1", status="Succeeded")])
    bad = res("Failed", [StepResult(id="s1", status="Succeeded"), StepResult(id="s2", status="Failed", stdout="out")])
    assert Answer.of(ok) == Answer("Succeeded") and Answer.of(ok).succeeded
    assert Answer.of(bad) == Answer("Failed", "s2", "out") and not Answer.of(bad).succeeded


def test_recorded_answers_parse_into_agents_and_services():
    fields = {"c/x@r/a/0": Answer("Failed", "s", "e").to_doc(),
              "input:render": ServiceAnswer("join@r", "Ready", "d" * 64, "").to_doc().encode()}
    got = Answers.parse(fields)
    assert got.commands == {"c/x@r/a/0": Answer("Failed", "s", "e")}
    assert got.services == {"render": ServiceAnswer("join@r", "Ready", "d" * 64, "")}
    assert json.loads(fields["c/x@r/a/0"]) == {"status": "Failed", "step": "s", "stderr": "e"}  # the stored form


def test_decisions_are_tagged_by_the_row_of_the_carriers_table_they_take():
    assert [d.action for d in (Send(("a",)), Send(("e",), "snapshot"), RunLocally("drain", ("a",)), Wait(), Fail("x"))] == [
        "send", "snapshot", "drain", "wait", "fail"]
    assert Fail("x", ("a", "b")).node == "a" and Fail("x").node == ""
