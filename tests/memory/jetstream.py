"""The in-memory JetStream behind bus.py: the streams of bke.adapters.bus.streams (each keeps the
messages published on its subjects, de-duplicated by `Nats-Msg-Id`), durable consumers (pull, as
every service's FastConsumer fetches; push one at a time, as each agent's AgentLoop binds) and the
object store (a spec sent by reference; an etcd snapshot published in chunks by an agent).

A consumer made after messages were stored gets them all (DeliverPolicy.ALL, what every BKE
consumer asks for); an acknowledged message of a work-queue stream is gone for every consumer.
A nack's delay is cut to NAK_DELAY_CAP_S: the tier checks what comes of a retry, not how long
the server would have held it.
"""
from __future__ import annotations

import asyncio
import collections
import json
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import ObjectInfo, PubAck, RetentionPolicy
from nats.js.errors import NoStreamResponseError, ObjectNotFoundError

from bke.adapters.bus.streams import STREAMS

from .bus import MemoryNats, Router, subject_matches

__all__ = ["MemoryJetStream", "NAK_DELAY_CAP_S", "Streams"]

NAK_DELAY_CAP_S = 0.02
MSG_ID = "Nats-Msg-Id"


@dataclass
class _Stored:
    stream: str
    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]
    gone: bool = False  # acknowledged in a work-queue stream


@dataclass
class _Consumer:
    stream: str
    durable: str
    filter_subject: str
    router: Router
    pending: collections.deque[JsMsg] = field(default_factory=collections.deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    bound: bool = False
    delivered: int = 0

    def offer(self, stored: _Stored, count: int = 1) -> None:
        self.router.busy += 1
        self.pending.append(JsMsg(stored, self, count))
        self.ready.set()


class JsMsg:
    """One delivery (nats-py's Msg of a JetStream consumer: what settle and AgentLoop call)."""

    def __init__(self, stored: _Stored, consumer: _Consumer, count: int):
        self.stored, self.consumer, self.count = stored, consumer, count
        self.subject, self.data, self.headers = stored.subject, stored.data, dict(stored.headers)
        self.reply = f"$JS.ACK.{stored.stream}.{consumer.durable}"
        self.metadata = SimpleNamespace(num_delivered=count, stream=stored.stream, consumer=consumer.durable)
        self.settled = asyncio.Event()

    def _done(self) -> bool:
        if self.settled.is_set():
            return False
        self.settled.set()
        self.consumer.router.busy -= 1
        return True

    async def ack(self) -> None:
        if self._done() and self.consumer.router.streams.retention[self.stored.stream] == RetentionPolicy.WORK_QUEUE:
            self.stored.gone = True

    async def ack_sync(self, timeout: float = 1.0) -> JsMsg:
        await self.ack()
        return self

    async def term(self) -> None:
        self._done()

    async def in_progress(self) -> None:
        return None

    async def nak(self, delay: float | None = None) -> None:
        if not self._done():
            return
        consumer, stored, count = self.consumer, self.stored, self.count + 1
        consumer.router.busy += 1  # the redelivery is work still to do

        def again() -> None:
            consumer.router.busy -= 1
            consumer.offer(stored, count)

        asyncio.get_running_loop().call_later(min(delay or 0.0, NAK_DELAY_CAP_S), again)


class Streams:
    """Every stream's messages and consumers."""

    def __init__(self, router: Router) -> None:
        self.router = router
        self.subjects = {d.name: d.subjects for d in STREAMS}
        self.retention = {d.name: d.retention for d in STREAMS}
        self.stored: dict[str, list[_Stored]] = {d.name: [] for d in STREAMS}
        self.msg_ids: dict[str, set[str]] = {d.name: set() for d in STREAMS}
        self.consumers: dict[tuple[str, str], _Consumer] = {}
        self.objects: dict[str, dict[str, tuple[Any, bytes]]] = collections.defaultdict(dict)
        self.chunks: dict[str, bytearray] = collections.defaultdict(bytearray)  # object store chunks by nuid
        self.push: list[_PushSub] = []

    async def close(self) -> None:
        for sub in list(self.push):
            await sub.unsubscribe()

    def stream_of(self, subject: str) -> str | None:
        return next((name for name, subjects in self.subjects.items()
                     if any(subject_matches(f, subject) for f in subjects)), None)

    def object_part(self, subject: str, data: bytes) -> None:
        """An object published as an agent publishes it (bke.adapters.etcdsnap.upload): its chunks on
        `$O.<bucket>.C.<nuid>`, then its meta (nats-py's ObjectInfo) on `$O.<bucket>.M.<name>`,
        which makes it visible."""
        _, bucket, kind, token = subject.split(".", 3)
        if kind == "C":
            self.chunks[token] += data
            return
        info = ObjectInfo.from_response(json.loads(data))
        self.objects[bucket][info.name] = (info, bytes(self.chunks.pop(info.nuid, b"")))

    def store(self, subject: str, data: bytes, headers: dict[str, str]) -> bool:
        stream = self.stream_of(subject)
        if stream is None:
            return False
        msg_id = headers.get(MSG_ID)
        if msg_id is not None:
            if msg_id in self.msg_ids[stream]:
                return True  # a duplicate within the window: stored once
            self.msg_ids[stream].add(msg_id)
        stored = _Stored(stream, len(self.stored[stream]) + 1, subject, data, headers)
        self.stored[stream].append(stored)
        for c in self.consumers.values():
            if c.stream == stream and subject_matches(c.filter_subject, subject):
                c.offer(stored)
        return True

    def consumer(self, stream: str, durable: str, filter_subject: str) -> _Consumer:
        c = self.consumers.get((stream, durable))
        if c is None:
            c = self.consumers[(stream, durable)] = _Consumer(stream, durable, filter_subject, self.router)
            for stored in self.stored[stream]:
                if not stored.gone and subject_matches(filter_subject, stored.subject):
                    c.offer(stored)
        return c


class _PullSub:
    def __init__(self, consumer: _Consumer):
        self.consumer = consumer

    async def fetch(self, batch: int = 1, timeout: float | None = 5.0) -> list[JsMsg]:
        c = self.consumer
        while not c.pending:
            c.ready.clear()
            try:
                await asyncio.wait_for(c.ready.wait(), timeout)
            except TimeoutError as exc:
                raise NatsTimeout from exc
        out: list[JsMsg] = []
        while c.pending and len(out) < batch:
            out.append(c.pending.popleft())
        return out

    async def unsubscribe(self) -> None:
        return None


class _PushSub:
    """A bound push consumer with max_ack_pending=1: the next message only once this one is settled."""

    def __init__(self, consumer: _Consumer, cb: Any):
        self.consumer, self.cb = consumer, cb
        consumer.bound = True
        self.task = asyncio.create_task(self._run(), name=f"memory-push:{consumer.durable}")

    async def _run(self) -> None:
        c = self.consumer
        while True:
            while not c.pending:
                c.ready.clear()
                await c.ready.wait()
            msg = c.pending.popleft()
            await self.cb(msg)
            await msg.settled.wait()

    async def unsubscribe(self) -> None:
        self.consumer.bound = False
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


class _ObjectStore:
    def __init__(self, objects: dict[str, tuple[Any, bytes]]):
        self.objects = objects

    async def put(self, name: str, data: bytes, **_: Any) -> Any:
        info = SimpleNamespace(name=name, size=len(data), headers=None, deleted=False)
        self.objects[name] = (info, bytes(data))
        return info

    async def get_info(self, name: str, **_: Any) -> Any:
        if name not in self.objects:
            raise ObjectNotFoundError
        return self.objects[name][0]

    async def list(self, **_: Any) -> list[Any]:
        return [info for info, _ in self.objects.values()]

    async def get(self, name: str, writeinto: Any = None, **_: Any) -> Any:
        info = await self.get_info(name)
        data = self.objects[name][1]
        if writeinto is not None:
            writeinto.write(data)
            return SimpleNamespace(info=info, data=None)
        return SimpleNamespace(info=info, data=data)


class MemoryJetStream:
    """nats-py's JetStreamContext, the part BKE's services and agents use."""

    def __init__(self, nc: MemoryNats):
        self.nc, self.streams = nc, nc.router.streams

    async def publish(self, subject: str, payload: bytes = b"", timeout: float | None = None,
                      stream: str | None = None, headers: dict[str, str] | None = None) -> PubAck:
        if subject.startswith("$O."):
            self.streams.object_part(subject, payload)
            return PubAck(stream=f"OBJ_{subject.split('.')[1]}", seq=0)
        name = self.streams.stream_of(subject)
        if name is None:
            raise NoStreamResponseError
        self.nc.router.publish(subject, payload, headers, "", self.nc)
        return PubAck(stream=name, seq=len(self.streams.stored[name]))

    async def add_consumer(self, stream: str, config: Any = None, **_: Any) -> Any:
        c = self.streams.consumer(stream, config.durable_name, config.filter_subject)
        return SimpleNamespace(name=c.durable, stream_name=stream, config=config, push_bound=c.bound)

    async def pull_subscribe(self, subject: str, durable: str, stream: str | None = None, config: Any = None,
                             **_: Any) -> _PullSub:
        return _PullSub(self.streams.consumer(stream or self.streams.stream_of(subject) or "", durable, subject))

    async def subscribe_bind(self, stream: str, config: Any, consumer: str, cb: Any = None, **_: Any) -> _PushSub:
        sub = _PushSub(self.streams.consumer(stream, consumer, config.filter_subject), cb)
        self.streams.push.append(sub)
        return sub

    async def object_store(self, bucket: str) -> _ObjectStore:
        return _ObjectStore(self.streams.objects[bucket])
