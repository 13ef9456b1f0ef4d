"""A fleet's trace of what its agents received and answered (bke_agent.trace), phase by phase:
the bench's per-phase figures and its same-bytes floor are read from it."""
from __future__ import annotations

from bke_agent.trace import PhaseTrace


def test_each_phase_keeps_its_commands_results_and_times_node_by_node() -> None:
    ticks = iter([1.0, 2.0, 2.5, 3.0, 4.0, 5.0])
    trace = PhaseTrace(lambda: next(ticks))
    trace.received("node-env", "n1", 9000)  # 1.0
    trace.received("node-env", "n2", 9100)  # 2.0
    trace.answered("node-env", "n2", 400)   # 2.5
    trace.answered("node-env", "n1", 410)   # 3.0
    trace.received("certs", "n1", 5000)     # 4.0
    trace.answered("certs", "n1", 700)      # 5.0
    env = trace.phases["node-env"]
    assert (env.commands, env.command_bytes, env.result_bytes) == (2, 18100, 810)
    assert (env.first_command_at, env.last_command_at, env.last_result_at) == (1.0, 2.0, 3.0)
    # each result is paired with its own node's command, whatever the order they ended in
    assert env.by_node == {"n2": [(9100, 400)], "n1": [(9000, 410)]}
    assert trace.phases["certs"].by_node == {"n1": [(5000, 700)]}


def test_a_redelivered_command_counts_again() -> None:
    trace = PhaseTrace(lambda: 0.0)
    for _ in range(2):
        trace.received("workers", "n1", 100)
        trace.answered("workers", "n1", 50)
    assert trace.phases["workers"].commands == 2 and trace.phases["workers"].by_node == {"n1": [(100, 50), (100, 50)]}
