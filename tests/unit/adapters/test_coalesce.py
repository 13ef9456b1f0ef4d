"""Calls of one turn, per key, served as one batch (bke.adapters.coalesce): each caller gets its
own item's answer, a later turn is a batch of its own, and the batch's error is every caller's."""
from __future__ import annotations

import asyncio

import pytest

from bke.adapters.coalesce import Coalesced


async def test_the_calls_of_one_turn_are_one_batch_per_key_each_answered_its_own() -> None:
    batches: list[tuple[str, list[int]]] = []

    async def serve(key: str, items: list[int]) -> list[str]:
        batches.append((key, items))
        return [f"{key}{i * 10}" for i in items]

    double = Coalesced(serve)
    got = await asyncio.gather(double("a", 1), double("b", 2), double("a", 3))
    assert got == ["a10", "b20", "a30"]
    assert sorted(batches) == [("a", [1, 3]), ("b", [2])]
    assert await double("a", 4) == "a40" and batches[-1] == ("a", [4])  # a later turn: its own batch


async def test_the_batch_s_error_is_each_caller_s_own() -> None:
    async def serve(key: str, items: list[int]) -> list[int]:
        raise ConnectionError("store away")

    failing = Coalesced(serve)
    got = await asyncio.gather(failing("a", 1), failing("a", 2), return_exceptions=True)
    assert [type(g) for g in got] == [ConnectionError, ConnectionError]
    with pytest.raises(ConnectionError):
        await failing("a", 3)


async def test_a_caller_cancelled_while_it_waits_leaves_the_others_answered() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def serve(key: str, items: list[int]) -> list[int]:
        started.set()
        await release.wait()
        return items

    echo = Coalesced(serve)
    first, second = asyncio.ensure_future(echo("a", 1)), asyncio.ensure_future(echo("a", 2))
    await started.wait()
    first.cancel()
    release.set()
    assert await second == 2
    with pytest.raises(asyncio.CancelledError):
        await first
