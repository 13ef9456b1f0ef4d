"""An operation's record in Redis, one per cluster, for any record of bke.core.operation:

    <key(c)>           string  the current (or last) operation, JSON
    <results_key(c)>   hash    command id -> an agent's answer; `input:<name>` -> a service's
                               (bke.core.operation.fold)
    <index>            set     clusters with such a record (resumed after a restart)

Only the loop's pass (under the operation's lease) and the start (a WATCH transaction that
refuses while the check says so) write the record; answers are recorded beside it and folded in
by the next pass, so an answer that arrives twice counts once.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bke.contracts.agent import CommandResult
from bke.core.operation import INPUT_PREFIX, Answer, Answers, Record, ServiceAnswer
from bke.core.state.schema import StoredVersionTooNew, StoredVersionTooOld, record_kind
from bke.adapters.state.exclusive import write_unless

__all__ = ["RecordStore"]

R = TypeVar("R", bound=Record)


def _s(v: str | bytes) -> str:
    return v.decode() if isinstance(v, bytes) else v


class RecordStore(Generic[R]):
    def __init__(self, redis: Redis, parse: Callable[[str | bytes], R], key: Callable[[str], str],
                 results_key: Callable[[str], str], index: str):
        self.redis, self.parse, self.key, self.results_key, self.index = redis, parse, key, results_key, index

    async def load(self, cluster: str) -> R | None:
        raw = await self.redis.get(self.key(cluster))
        return None if raw is None else self.parse(raw)

    def forget(self, cluster: str) -> None:
        """Drop what is kept here of the cluster's record (nothing: a store that keeps the object
        it saved last, the upgrade's, drops it after a pass that raised)."""

    async def load_judged(self, cluster: str) -> tuple[R | None, str]:
        """The record a request is judged against, or why it cannot be read (then None): a form
        newer than this service reads (a newer one wrote it) or older than it converts. Waiting
        changes neither, so the request is answered with that reason, never retried."""
        try:
            return await self.load(cluster), ""
        except StoredVersionTooNew as exc:
            newest = record_kind(exc.kind).current
            return None, (f"the {exc.kind} record of {cluster} is in form version {exc.version}, and this dispatcher "
                          f"reads forms up to {newest}: a newer dispatcher wrote it; upgrade this dispatcher")
        except StoredVersionTooOld as exc:
            return None, str(exc)

    async def save(self, rec: R) -> bool:
        """Write the record unless it is gone (a delete removed the cluster's records): False then."""
        return bool(await self.redis.set(self.key(rec.cluster), rec.to_json(), xx=True))

    async def write(self, rec: R) -> None:
        """Write the record whatever is stored: a refused operation shown where nothing runs."""
        await self.redis.set(self.key(rec.cluster), rec.to_json())

    async def start(self, rec: R, check: Callable[[R | None], str]) -> str:
        """Store `rec` (its answers cleared, its cluster indexed) unless `check(current)` refuses;
        the refusal ("" when stored). Atomic against another replica starting one at the same time."""

        def write(pipe: Pipeline) -> None:
            pipe.set(self.key(rec.cluster), rec.to_json())
            pipe.delete(self.results_key(rec.cluster))
            pipe.sadd(self.index, rec.cluster)

        return await write_unless(self.redis, self.key(rec.cluster),
                                  lambda raw: check(None if raw is None else self.parse(raw)), write)

    async def record_result(self, res: CommandResult) -> None:
        await self.redis.hset(self.results_key(res.cluster), res.command_id, Answer.of(res).to_doc())

    async def record_input(self, cluster: str, name: str, request_id: str, status: str, digest: str, reason: str) -> None:
        doc = ServiceAnswer(request_id, status, digest, reason).to_doc()
        await self.redis.hset(self.results_key(cluster), INPUT_PREFIX + name, doc)

    async def results(self, cluster: str) -> Answers:
        raw = await self.redis.hgetall(self.results_key(cluster))
        return Answers.parse({_s(k): v for k, v in raw.items()})

    async def clusters(self) -> list[str]:
        return sorted(_s(c) for c in await self.redis.smembers(self.index))
