"""The pieces of the dispatcher's wiring that choose (bke_dispatcher.wiring): where a service's
answer goes (a join's first), and which heartbeat runtime is stored."""
from __future__ import annotations

import json

import pytest

from bke_dispatcher.wiring.answers import join_first
from bke_dispatcher.wiring.heartbeats import runtime_json


@pytest.mark.parametrize(("join_takes", "install_gets"), [(True, []), (False, ["ev"])])
async def test_an_answer_goes_to_the_install_only_when_no_join_takes_it(join_takes: bool, install_gets: list[str]) -> None:
    joins, installs = [], []

    async def join(ev: str) -> bool:
        joins.append(ev)
        return join_takes

    async def install(ev: str) -> None:
        installs.append(ev)

    await join_first(join, install)("ev")
    assert joins == ["ev"] and installs == install_gets


def test_a_runtime_is_stored_as_its_canonical_json() -> None:
    raw = {"agentVersion": "1.2.3", "python": "3.11", "machine": "x86_64", "libc": "glibc"}
    stored = runtime_json(raw)
    assert stored is not None
    assert json.loads(stored)["agentVersion"] == "1.2.3" and json.loads(stored)["implementation"] == "cpython"
    assert runtime_json(json.loads(stored)) == stored  # the same runtime: the same bytes (written once)


@pytest.mark.parametrize("raw", [None, "1.2.3", [], {"agentVersion": "one", "python": "3.11", "machine": "x86_64"},
                                 {"python": "3.11", "machine": "x86_64"}])
def test_a_runtime_that_does_not_parse_is_not_stored(raw: object) -> None:
    assert runtime_json(raw) is None
