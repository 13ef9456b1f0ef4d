"""The dispatcher's domain figures (bke_dispatcher.metrics) from its records on a real Redis:
installs, phases and nodes by status and commands in flight, moving as the records move."""
from __future__ import annotations

import pytest

from bke.adapters.http.metrics import ServiceMetrics
from bke.core.plan import plan_spec_text
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest
from bke.adapters.state.keys.dispatcher import install_key
from bke_dispatcher.metrics import DispatcherFigures
from bke_dispatcher.phases import PHASES
from bke_dispatcher.state import DispatcherState

pytestmark = pytest.mark.integration
SEED = open("examples/seed-3m1w.yaml").read()


async def test_figures_follow_the_install_records(redis_client):
    plan = plan_spec_text(SEED).plan
    assert plan is not None
    pj = plan.to_json()
    await RedisPlanStore(redis_client).save(plan, pj, plan_digest(pj), "r1", "t0")
    state = DispatcherState(redis_client)
    metrics = ServiceMetrics("dispatcher")
    figures = DispatcherFigures(metrics, redis_client, PlanCache(redis_client))
    c = plan.cluster

    def sample(name: str, **labels: str) -> float | None:
        return metrics.sample(name, labels)

    await figures.refresh()
    assert sample("bke_clusters", state="Running") == 0 and sample("bke_nodes", cluster=c, state="Pending") is None

    await state.start_install(c, "r1", "t0", plan_digest(pj))
    await state.set_phase(c, "agents", status="Succeeded")
    await state.set_phase(c, "node-env", status="Running")
    sent = {h: {"id": f"{c}/node-env/{h}/0", "gen": 0, "status": "Sent", "step": "", "stderr": "", "at": "t1"}
            for h in ("master1", "master2")}
    await state.mark_sent(c, "node-env", sent, 2, "t1")
    await figures.refresh()
    assert sample("bke_clusters", state="Running") == 1
    assert sample("bke_phases", cluster=c, state="Succeeded") == 1 and sample("bke_phases", cluster=c, state="Running") == 1
    assert sample("bke_phases", cluster=c, state="Pending") == len(PHASES) - 2  # every other phase of the table
    assert sample("bke_nodes", cluster=c, state="Running") == 2 and sample("bke_nodes", cluster=c, state="Pending") == 2
    assert sample("bke_commands_in_flight", cluster=c) == 2

    assert await state.finish_command(c, "node-env", "master1", sent["master1"]["id"], 0, "Succeeded", "", "", "t2") == 1
    assert await state.finish_command(c, "node-env", "master2", sent["master2"]["id"], 0, "Failed", "sysctl", "no", "t2") == 1
    await state.set_install(c, status="Failed", message="master2 failed")
    await figures.refresh()
    assert sample("bke_commands_in_flight", cluster=c) == 0
    assert sample("bke_nodes", cluster=c, state="Succeeded") == 1 and sample("bke_nodes", cluster=c, state="Failed") == 1
    assert sample("bke_clusters", state="Failed") == 1 and sample("bke_clusters", state="Running") == 0
    text = (await metrics.exposition()).decode()
    assert f'bke_nodes{{cluster="{c}",state="Failed"}} 1.0' in text

    await redis_client.delete(install_key(c))  # a reset install (a replaced plan): its series go
    await figures.refresh()
    assert sample("bke_nodes", cluster=c, state="Failed") is None and sample("bke_clusters", state="Failed") == 0
