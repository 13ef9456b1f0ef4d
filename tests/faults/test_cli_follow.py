"""`bke apply`/`retry` follow an install through an outage of the dispatcher's store: they say
once that they wait, keep waiting, and end with the install's outcome."""
from __future__ import annotations

import asyncio
import io

import pytest
from redis.asyncio import Redis
from rich.console import Console

from bke.adapters.bus import EventWatch
from bke.adapters.bus.streams import ensure_streams
from bke_cli.install_follow import submit_and_follow
from bke_dispatcher.app import create_service
from bke_dispatcher.settings import DispatcherSettings

from .helpers import _announce, _ids, _null_fleet, _stored_cluster, connect, eventually, restart_redis, stop_redis

pytestmark = [pytest.mark.integration, pytest.mark.faults]


async def test_follow_says_once_that_it_waits_through_a_redis_outage_and_ends_with_the_outcome(own_runtime, capsys, operator_box):
    info = own_runtime.info
    nc = await connect(info.nats_url)
    js = nc.jetstream()
    await ensure_streams(js)
    r = Redis.from_url(info.redis_url)
    plan, digest = await _stored_cluster(r, "follow")
    svc = create_service(DispatcherSettings(nats_url=info.nats_url, redis_url=info.redis_url, owner="o", mode="lab",
                                            health_interval_s=0))
    await svc.start()
    fleet = await _null_fleet(nc, js, info.nats_url, "follow", plan, r, operator_box)
    await r.aclose()
    out = io.StringIO()
    err: list[str] = []
    try:
        async with EventWatch(nc, ["bke.v1.install.follow.phase"]) as watch:
            await _announce(js, "follow", digest, [n.hostname for n in plan.nodes], _ids(fleet))
            await watch.wait_for(lambda e: True, timeout=30)  # the install is Running (waiting for agents)
        port = stop_redis(own_runtime)
        follow = asyncio.create_task(submit_and_follow(info.nats_url, b"", "follow", 120.0, Console(file=out), submit=False))

        async def said_it_waits():
            err.extend(capsys.readouterr().err.splitlines())
            return any(line.startswith("WARNING ") for line in err)
        await eventually(said_it_waits, 30, "the follower says it waits")
        # the outage goes on for a few more of the follower's polls (one a second): still one line
        await asyncio.sleep(3.0)
        restart_redis(own_runtime, port)
        await fleet.start()
        code = await asyncio.wait_for(follow, timeout=120)
        err.extend(capsys.readouterr().err.splitlines())
        assert code == 0, (err, out.getvalue())
        warnings = [line for line in err if line.startswith("WARNING ")]
        assert len(warnings) == 1 and "store unavailable" in warnings[0] and "waiting" in warnings[0], err
        assert not [line for line in err if line.startswith("ERROR ")], err
        assert "cluster follow installed" in out.getvalue()
    finally:
        await fleet.stop(grace=1.0)
        await svc.stop()
        await nc.close()

