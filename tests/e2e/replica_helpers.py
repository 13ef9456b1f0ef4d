"""What the replica tests read: each process's own count of the messages it handled, and the
events a service published (to see that nothing was decided twice)."""
from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import nats
from nats.aio.client import Client as NatsClient

from bke.contracts.health import ServiceHealth, health_subject

__all__ = ["answer_of", "handled_per_replica", "stream_events"]


async def handled_per_replica(nc: NatsClient, service: str, pids: dict[str, int], timeout: float = 10.0
                              ) -> dict[str, dict[str, int]]:
    """{processes.json key: {durable: messages handled}} for every replica of `service` in `pids`.

    Why this is honest: the count is kept by each process in its own memory
    (`Service.handled`), incremented only when one of its handlers returned for a message that
    JetStream delivered to it, and each process answers the health request for itself (no queue
    group), naming its pid, which is matched to the pid the lab started."""
    by_pid = {pid: key for key, pid in pids.items()}
    got: dict[str, dict[str, int]] = {}
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        deadline = time.monotonic() + timeout
        while set(got) != set(pids):
            if time.monotonic() > deadline:
                raise AssertionError(f"{service}: replicas {sorted(set(pids) - set(got))} did not answer")
            await nc.publish(health_subject(service), b"", reply=inbox)
            # every replica answers this one request; read answers until a short quiet spell
            while True:
                try:
                    msg = await sub.next_msg(timeout=1.0)
                except (nats.errors.TimeoutError, asyncio.TimeoutError):
                    break
                if not msg.data:  # a "no responders" status: a replica not subscribed yet
                    continue
                doc = ServiceHealth.model_validate_json(msg.data)
                key = by_pid.get(int(doc.instance.rsplit(":", 1)[1]))
                if key is not None:
                    got[key] = doc.handled
    finally:
        await sub.unsubscribe()
    return got


async def stream_events(nc: NatsClient, subject: str) -> list[dict[str, Any]]:
    """Every message stored on `subject` (a filter), oldest first, as JSON documents. `nc` must
    be allowed to replay the stream (tests.e2e.event_reader: no BKE identity is)."""
    js = nc.jetstream()
    sub = await js.subscribe(subject, ordered_consumer=True)
    out: list[dict[str, Any]] = []
    try:
        while True:
            try:
                msg = await sub.next_msg(timeout=2.0)  # nothing more within 2 s: the stream holds no more
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                return out
            out.append(json.loads(msg.data))
            if msg.metadata.num_pending == 0:
                return out
    finally:
        await sub.unsubscribe()


async def answer_of(nc: NatsClient, subject: str, request_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """The event on `subject` answering `request_id` (read from the stream: it may already be
    there; `nc` as for `stream_events`)."""
    js = nc.jetstream()
    sub = await js.subscribe(subject, ordered_consumer=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no answer to {request_id} on {subject} within {timeout:.0f} s")
            try:
                msg = await sub.next_msg(timeout=left)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                continue
            doc = json.loads(msg.data)
            if doc.get("requestId") == request_id:
                return doc
    finally:
        await sub.unsubscribe()
