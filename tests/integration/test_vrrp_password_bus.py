"""The VRRP password over the bus, on real NATS and Redis: the upgrader's question
(bke_upgrader.vrrp_password) answered by a real renderer (`bke.v1.vrrp-password.get`) from the
password it keeps, sealed to the request's own key; never in clear on the wire; none for a cluster
that has none; with no renderer, a retryable error."""
from __future__ import annotations

import pytest

from bke.adapters.bus.streams import ensure_streams
from bke.adapters.state.keys.renderer import vrrp_password_key
from bke.contracts.vrrp_password import VRRP_PASSWORD_GET, VrrpPassword
from bke_renderer.app import create_service
from bke_renderer.settings import RendererSettings
from bke_upgrader.vrrp_password import VrrpPasswordClient, VrrpPasswordUnavailable

pytestmark = pytest.mark.integration
C = "vrrp"


async def test_the_upgrader_asks_a_real_renderer_for_the_vrrp_password(nats_url, redis_url, redis_client, nats_client):
    await ensure_streams(nats_client.jetstream())
    await redis_client.set(vrrp_password_key(C), "Vr7pQ2xZ")  # as the renderer's first render made it
    replies: list[bytes] = []

    async def request(subject: str, payload: bytes, timeout: float) -> bytes:
        replies.append(data := (await nats_client.request(subject, payload, timeout=timeout)).data)
        return data

    svc = create_service(RendererSettings(nats_url=nats_url, redis_url=redis_url))
    await svc.start()
    try:
        ask = VrrpPasswordClient(request, 10.0)
        assert await ask(C) == "Vr7pQ2xZ"
        assert await ask("no-such-cluster") is None
    finally:
        await svc.stop()
    assert b"Vr7pQ2xZ" not in replies[0]  # sealed on the wire
    assert VrrpPassword.model_validate_json(replies[0]).sealed_b64
    assert VrrpPassword.model_validate_json(replies[1]).sealed_b64 is None
    assert await redis_client.get(vrrp_password_key("no-such-cluster")) is None  # asking makes none

    with pytest.raises(VrrpPasswordUnavailable, match=f"no answer on {VRRP_PASSWORD_GET}"):  # no renderer runs
        await VrrpPasswordClient(request, 1.0)(C)
