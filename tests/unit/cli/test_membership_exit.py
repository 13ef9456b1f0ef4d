"""`bke lab join-nodes` / `bke lab remove-nodes`: the exit code of a Failed answer comes from its
`kind` (structured), 2 for a refusal and 1 for a failure (a given-up request), the reason printed."""
from __future__ import annotations

import json

import pytest
import typer
from rich.console import Console

from bke.contracts.membership import JoinNodesFinished, MembershipNode, RemoveNodesFinished
from bke_cli.membership_cmd import _exit, refused


def _code(doc: dict[str, object]) -> int:
    with pytest.raises(typer.Exit) as exc:
        _exit(doc, Console())
    return int(exc.value.exit_code)


def test_a_given_up_answer_is_a_failure_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    ev = RemoveNodesFinished(request_id="r", cluster="c", status="Failed", at="t", kind="operational",
                             reason="the dispatcher gave up on this removal request after every delivery failed: boom")
    doc = json.loads(ev.to_bytes())
    assert doc["nodes"] == [] and not refused(doc)
    assert _code(doc) == 1
    assert "gave up on this removal request after every delivery failed: boom" in capsys.readouterr().err


def test_a_refusal_exits_2_and_a_failed_node_1() -> None:
    refusal = JoinNodesFinished(request_id="j", cluster="c", status="Failed", reason="planDigest: no", at="t",
                                kind="invalid")
    assert _code(json.loads(refusal.to_bytes())) == 2
    node = MembershipNode(hostname="n", status="Failed", stage="certs", reason="x")
    failed = JoinNodesFinished(request_id="j", cluster="c", status="Failed", reason="n: x", at="t", nodes=[node],
                               kind="operational")
    assert _code(json.loads(failed.to_bytes())) == 1


def test_an_answer_of_a_dispatcher_older_than_the_kind_keeps_the_old_rule() -> None:
    # no `kind`: a refusal was the answer that named no node
    assert refused({"status": "Failed", "nodes": []})
    assert not refused({"status": "Failed", "nodes": [{"hostname": "n", "status": "Failed"}]})


def test_a_success_carries_no_kind_so_an_older_reader_still_reads_it() -> None:
    ok = JoinNodesFinished(request_id="j", cluster="c", status="Succeeded", at="t")
    assert "kind" not in json.loads(ok.to_bytes())
