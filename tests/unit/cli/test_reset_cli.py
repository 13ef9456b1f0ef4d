"""`bke reset` / `bke delete` before the bus: a "no" at the confirmation sends nothing and exits 2;
a bad name is refused naming the field (exit 2)."""
from __future__ import annotations

from typer.testing import CliRunner

from bke_cli.main import app


def test_no_at_the_confirmation_sends_nothing() -> None:
    # an unreachable NATS: had it tried to send, the exit would be 1 (cannot reach NATS)
    res = CliRunner().invoke(app, ["delete", "seed", "--nats", "nats://127.0.0.1:1"], input="n\n")
    assert res.exit_code == 2 and "delete cluster seed" in res.output
    res = CliRunner().invoke(app, ["reset", "seed", "--nodes", "node1, node2", "--nats", "nats://127.0.0.1:1"], input="n\n")
    assert res.exit_code == 2 and "reset node1, node2 of seed" in res.output


def test_a_bad_name_is_refused_naming_the_field() -> None:
    res = CliRunner().invoke(app, ["reset", "Bad_Name", "--yes", "--nats", "nats://127.0.0.1:1"])
    assert res.exit_code == 2 and "NAME" in res.output
