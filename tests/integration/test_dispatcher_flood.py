"""One node flooding the dispatcher's result consumer, on real NATS and Redis: past the bound
(bke.core.flood.FLOOD_LIMIT) the dispatcher puts one summary without payload in the dead-letter
stream and publishes one `bke.v1.agents.flooding` event for that node and window, dead-letters
no more of its bytes, and meanwhile another cluster's install, whose results come from other
nodes in the same window, finishes."""
from __future__ import annotations


import pytest
from redis.asyncio import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke.contracts.agent import agent_subject
from bke.contracts.deadletter import AGENTS_FLOODING, AgentFlooding, DeadLettered
from bke.contracts.statuses import OperationStatus
from bke.core.flood import FLOOD_LIMIT
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings
from tests.faults.helpers import ack_pending, eventually

from .test_dispatcher import _announce, _ids, _null_fleet, _stored_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROUND = 8  # what the outputs' stream keeps per node subject: every message of a round is consumed
FLOODED = FLOOD_LIMIT.outputs + 2 * ROUND  # past the bound, then some


async def _flood(js, subject: str, nats_client) -> None:
    """Malformed outputs of the largest size, a round at a time: each round is consumed before
    the next, so that the dispatcher sees every one (the stream would keep only the last few)."""
    body = b"x" * (200 * 1024)
    for start in range(0, FLOODED, ROUND):
        for _ in range(min(ROUND, FLOODED - start)):
            await js.publish(subject, body)

        async def drained() -> bool:
            return await ack_pending(nats_client, "dispatcher-results") == (0, 0)
        await eventually(drained, 30, "the round is consumed")


async def test_a_flooding_node_is_summarised_once_and_another_clusters_install_goes_on(
        nats_url, redis_url, redis_client, nats_client, operator_box):
    js = nats_client.jetstream()
    await ensure_streams(js)
    svc = create_service(DispatcherSettings(nats_url=nats_url, redis_url=redis_url, owner="flood-watch", mode="lab",
                                            health_interval_s=0))
    await svc.start()
    r = Redis.from_url(redis_url)
    plan, digest = await _stored_cluster(r, "calm-neighbour")
    fleet = await _null_fleet(nats_client, js, nats_url, "calm-neighbour", plan, r, operator_box)
    await r.aclose()
    flooder = agent_subject("noisy", "flooder", "result")
    try:
        async with EventWatch(nats_client, ["bke.v1.deadletter.dispatcher", AGENTS_FLOODING,
                                            "bke.v1.install.calm-neighbour.finished"]) as watch:
            await fleet.start()
            await _announce(js, "calm-neighbour", digest, [n.hostname for n in plan.nodes], _ids(fleet))
            await _flood(js, flooder, nats_client)  # while the neighbour installs
            done = await watch.wait_for(lambda e: e.subject.endswith(".finished"), timeout=120)
            assert done.data["status"] == OperationStatus.SUCCEEDED, done.data
            await watch.wait_for(lambda e: e.subject == AGENTS_FLOODING, timeout=15)
        letters = [DeadLettered.model_validate(e.data) for e in watch.seen if e.subject.startswith("bke.v1.deadletter.")]
        mine = [d for d in letters if d.subject == flooder]
        summaries = [d for d in mine if d.reason.startswith("flood:")]
        assert len(summaries) == 1 and summaries[0].payload_b64 == ""
        assert "node flooder of cluster noisy" in summaries[0].reason
        # the bytes of the first ones only, while the node was within the bound
        assert 0 < len(mine) - 1 <= FLOOD_LIMIT.outputs
        [event] = [AgentFlooding.model_validate(e.data) for e in watch.seen if e.subject == AGENTS_FLOODING]
        assert (event.cluster, event.node, event.service) == ("noisy", "flooder", "dispatcher")
        assert event.outputs == FLOOD_LIMIT.outputs + 1 and event.bytes >= event.outputs * 200 * 1024
        assert not [d for d in letters if d.subject != flooder]  # the neighbour's results were all taken
    finally:
        await fleet.stop(grace=1.0)
        await svc.stop()
