"""The operation slot's pure part (bke.adapters.state.operation_slot): the refusal names the holder in
the project's words, and every kind the brief names (the upcoming "apply" included) is one."""
from __future__ import annotations

from bke.adapters.state.operation_slot import KINDS, Claim, Holder, holder_of, refusal


def test_refusal_names_the_holder_in_the_project_words():
    assert refusal("c1", Holder("upgrade", "u1", "t0")) == "upgrade u1 of c1 is running: one operation per cluster"
    assert refusal("c1", Holder("rotation", "r1", "t0")) == "certificate rotation r1 of c1 is running: one operation per cluster"
    assert refusal("c1", Holder("etcd-restore", "x", "t0", "etcd-data")) == (
        "etcd restore x of etcd-data in c1 is running: one operation per cluster")
    assert Claim(True, Holder("reset", "z", "t0")).refusal("c1") == ""
    assert Claim(False, Holder("delete", "z", "t0")).refusal("c1") == "delete z of c1 is running: one operation per cluster"


def test_every_operation_kind_and_the_free_slot():
    assert set(KINDS) == {"install", "upgrade", "etcd-restore", "rotation", "reset", "delete", "apply", "join",
                          "removal"}
    assert holder_of("c1", [None, None, None, None, None]) is None
    assert holder_of("c1", ["apply", "a1", "t0", "1", None]) == Holder("apply", "a1", "t0", "")
