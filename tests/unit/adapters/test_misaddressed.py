"""A message on an agent's subject whose payload names another node is dropped before its
handler, counted on /metrics and logged with both nodes (bke.adapters.bus.misaddressed)."""
from __future__ import annotations

import logging

from bke.adapters.bus.delivery import _SUBJECT
from bke.adapters.bus.misaddressed import METRIC, Misaddressed, misaddressed
from bke.contracts.agent import CommandRefused, agent_subject
from bke.adapters.http.metrics import ServiceMetrics


def test_the_subject_and_the_payload_must_name_the_same_node() -> None:
    assert misaddressed(agent_subject("c1", "n1.example.com", "refused"), "c1", "n1.example.com") is None
    assert misaddressed(agent_subject("c1", "n1", "registered"), "c1", "n2") == ("c1", "n1")
    assert misaddressed(agent_subject("c1", "n1", "result"), "c2", "n1") == ("c1", "n1")
    assert misaddressed("bke.v1.agents.refused", "c1", "n2") is None  # not an agent's subject
    assert misaddressed("", "c1", "n2") is None  # outside a delivery


async def test_a_misaddressed_message_is_dropped_counted_and_logged(caplog) -> None:
    metrics = ServiceMetrics("dispatcher")
    seen: list[str] = []

    async def handler(ev: CommandRefused) -> list[str]:
        seen.append(ev.node)
        return ["handled"]

    guarded = Misaddressed(metrics, "dispatcher").guard("refused", handler)
    ev = CommandRefused(cluster="c1", node="n2", agent_id="a", reason="r", at="t")
    caplog.set_level(logging.WARNING, logger="bke.adapters.bus.misaddressed")
    _SUBJECT.set(agent_subject("c1", "n1", "refused"))
    assert await guarded(ev) == []
    _SUBJECT.set(agent_subject("c1", "n2", "refused"))
    assert await guarded(ev) == ["handled"]  # the positive control
    assert seen == ["n2"]
    labels = {"service": "dispatcher", "kind": "refused"}
    assert metrics.sample(f"{METRIC}_total", labels) == 1.0
    [line] = [r for r in caplog.records if r.name == "bke.adapters.bus.misaddressed"]
    assert (line.cluster, line.node, line.payload_node) == ("c1", "n1", "n2")  # type: ignore[attr-defined]
    assert "published on the subject of n1 in c1, its payload names n2 in c1" in line.getMessage()
