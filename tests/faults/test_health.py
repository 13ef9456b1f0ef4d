"""Every service answers `bke.v1.health.<service>` with its readiness and why it is not ready
(a service cut off from its store says so instead of staying silent)."""
from __future__ import annotations

import pytest

from bke.adapters.runtime.processes import free_port
from bke_dispatcher.app import create_service as dispatcher
from bke_dispatcher.settings import DispatcherSettings
from bke_planner.app import create_service as planner
from bke_planner.settings import PlannerSettings
from bke_renderer.app import create_service as renderer
from bke_renderer.settings import RendererSettings

from .helpers import eventually, health_of

pytestmark = [pytest.mark.integration, pytest.mark.faults]


@pytest.mark.parametrize("name,create,make_settings", [
    ("planner", planner, PlannerSettings), ("renderer", renderer, RendererSettings),
    ("dispatcher", dispatcher, lambda **kw: DispatcherSettings(mode="lab", health_interval_s=0, **kw)),
])
async def test_a_service_answers_ready_and_not_ready_with_the_reason(nats_url, redis_url, nats_client, name, create,
                                                                    make_settings):
    async def answer(want: bool):
        async def check():
            h = await health_of(nats_client, name)
            return h if h is not None and h.ready is want else None
        return await eventually(check, 15, f"{name} answers ready={want}")

    svc = create(make_settings(nats_url=nats_url, redis_url=redis_url))
    await svc.start()
    try:
        h = await answer(True)
        assert h.service == name and h.reasons == []
        assert h.conditions == {"nats": True, "streams": True, "redis": True, "state": True}
    finally:
        await svc.stop()
    # a Redis nobody listens on: not ready, and why
    svc = create(make_settings(nats_url=nats_url, redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    await svc.start()
    try:
        h = await answer(False)
        assert h.conditions["redis"] is False and h.conditions["nats"] is True
        assert len(h.reasons) == 1 and h.reasons[0].startswith("redis unreachable: ConnectionError")
    finally:
        await svc.stop()
