"""Stream replicas against a real 3-node NATS cluster (bke.lab.nats_cluster, no authentication):
`ensure_streams(js, replicas=N)` creates with N, converges an existing stream up or down without
losing its messages, brings the object buckets to N too (the blobs' with their time to live,
which a bucket made before it gets), and a call that gives no count creates with one and leaves
every existing count as it is. A service's publish while a stream elects a new leader is stored,
once."""
from __future__ import annotations

import asyncio
import signal

import pytest

from bke.adapters.bus.connect import connect_nats
from bke.adapters.bus.declare import DECLARE_TIMEOUT_S
from bke.adapters.bus.stored_publish import publish_stored
from bke.adapters.bus.streams import BUCKET_TTL_S, BUCKETS, OBJECT_BUCKET, STREAMS, ensure_streams
from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET
from bke.contracts import subjects as s
from bke.core.errors import is_unavailable
from bke.adapters.runtime.processes import pid_alive, poll_until
from bke.lab.nats_cluster import NatsCluster, stop_nats_cluster

pytestmark = pytest.mark.integration


async def _replicas(js) -> dict[str, int]:
    names = [d.name for d in STREAMS] + [f"OBJ_{b}" for b, _ in BUCKETS]
    out = {}
    for name in names:
        try:
            out[name] = (await js.stream_info(name)).config.num_replicas
        except Exception:  # noqa: BLE001 - not made (yet)
            out[name] = 0
    return out


async def test_streams_converge_to_the_replicas_asked_for(tmp_path):
    cluster = NatsCluster(tmp_path, 3, auth=None)
    urls, _, _ = cluster.ensure()
    nc = await connect_nats(urls)
    try:
        js = nc.jetstream(timeout=DECLARE_TIMEOUT_S)  # as the deploy step: a forming cluster is slow under load
        # the blob bucket as a release before its time to live made it (a first put, no config)
        await js.create_object_store(OBJECT_BUCKET)
        assert not (await js.stream_info(f"OBJ_{OBJECT_BUCKET}")).config.max_age
        await ensure_streams(js)  # no count: one replica, the buckets too
        assert set((await _replicas(js)).values()) == {1}
        subject = next(iter(s.EVENT_SUBJECTS)).replace(">", "x").replace("*", "x")
        await js.publish(subject, b"kept")

        await ensure_streams(js, replicas=3)
        assert set((await _replicas(js)).values()) == {3}
        # ... brought to its time to live; the snapshots are kept a month (an append-only bucket)
        assert (await js.stream_info(f"OBJ_{OBJECT_BUCKET}")).config.max_age == BUCKET_TTL_S[OBJECT_BUCKET] == 7 * 86400
        assert (await js.stream_info(f"OBJ_{ETCD_SNAPSHOT_BUCKET}")).config.max_age == 30 * 86400
        await ensure_streams(js)  # a caller without a count changes nothing
        assert set((await _replicas(js)).values()) == {3}
        await ensure_streams(js, replicas=3)  # converged: idempotent
        # the leader lists its followers once they have reported to it: a moment after the
        # scale-up, so read again under a deadline (the configured count above is immediate)
        deadline = asyncio.get_running_loop().time() + 15
        while True:
            events = await js.stream_info("BKE_EVENTS")
            if len(events.cluster.replicas or []) == 2 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)
        assert events.state.messages == 1 and len(events.cluster.replicas or []) == 2

        await ensure_streams(js, replicas=1)  # and down again
        assert set((await _replicas(js)).values()) == {1}
        assert (await js.stream_info("BKE_EVENTS")).state.messages == 1
    finally:
        await nc.close()
        assert len(stop_nats_cluster(tmp_path)) == 3


class _Tries:
    """nats-py's JetStream, counting the publishes no stream answered."""

    def __init__(self, js):
        self.js, self.unanswered = js, 0

    async def publish(self, subject, payload=b"", timeout=None, stream=None, headers=None):
        try:
            return await self.js.publish(subject, payload, timeout=timeout, headers=headers)
        except Exception as exc:
            self.unanswered += is_unavailable(exc)
            raise


async def test_a_publish_while_the_stream_elects_a_leader_is_stored_once(tmp_path):
    """The leader of BKE_EVENTS killed: a service's publish right then finds no stream (a core
    publish would be dropped), and is stored once the survivors have elected a new leader."""
    cluster = NatsCluster(tmp_path, 3, auth=None)
    urls, _, _ = cluster.ensure()
    nc = await connect_nats(urls)
    try:
        js = nc.jetstream(timeout=DECLARE_TIMEOUT_S)
        await ensure_streams(js, replicas=3)
        leader = cluster.node_of_server((await js.stream_info("BKE_EVENTS")).cluster.leader)
    finally:
        await nc.close()
    # a connection to the survivors only: the publish meets the election, not a reconnect
    survivors = ",".join(n.url for n in cluster.nodes() if n.index != leader)
    nc = await connect_nats(survivors)
    try:
        pid = cluster.kill_node(leader, signal.SIGKILL)
        poll_until(lambda: True if not pid_alive(pid) else None, timeout=10, what="the stream's leader to die")
        tries = _Tries(nc.jetstream())
        await publish_stored(tries, s.PLAN_CREATED, b"decided once", {})
        assert tries.unanswered, "the stream had a leader again before the publish: nothing was tested"
        js = nc.jetstream(timeout=DECLARE_TIMEOUT_S)
        assert (await js.stream_info("BKE_EVENTS")).state.messages == 1  # a new stream: this one alone
    finally:
        await nc.close()
        stop_nats_cluster(tmp_path)
