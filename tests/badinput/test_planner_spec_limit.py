"""A spec sent by reference (object store) is refused from its size before it is read whole;
the planner answers with the field and goes on."""
from __future__ import annotations

import uuid

import pytest

from bke.adapters.bus import EventWatch, get_blob, put_blob
from bke.adapters.bus.blobs import BlobTooLarge, _Capped
from bke.contracts import CLUSTER_REJECTED, INSTALL_CLUSTER, PLAN_CREATED, InstallCluster
from bke.core.spec import MAX_SPEC_BYTES
from bke_planner.app import create_service
from bke_planner.settings import PlannerSettings

pytestmark = pytest.mark.integration
SEED = open("examples/seed-3m1w.yaml").read()


@pytest.fixture
async def planner(nats_url, redis_url, redis_client):
    svc = create_service(PlannerSettings(nats_url=nats_url, redis_url=redis_url, max_deliver=3))
    await svc.start()
    try:
        yield svc
    finally:
        await svc.stop()


async def test_a_spec_object_over_the_limit_is_rejected_naming_spec_ref(planner, nats_client):
    js = nats_client.jetstream()
    ref = await put_blob(js, "bke-blobs", "specs/too-big.yaml", b"#" * (MAX_SPEC_BYTES + 1))
    rid, ok = str(uuid.uuid4()), str(uuid.uuid4())
    async with EventWatch(nats_client, [PLAN_CREATED, CLUSTER_REJECTED]) as watch:
        await js.publish(INSTALL_CLUSTER, InstallCluster(request_id=rid, spec_ref=ref).to_bytes())
        rej = await watch.wait_for(lambda e: e.data.get("requestId") == rid, timeout=30)
        assert rej.subject == CLUSTER_REJECTED
        assert rej.data["errors"] == [{"path": "specRef", "message": f"the object is {MAX_SPEC_BYTES + 1} bytes; the limit is {MAX_SPEC_BYTES}"}]
        good = await put_blob(js, "bke-blobs", "specs/seed-limit.yaml", SEED.replace("name: seed\n", "name: seed-limit\n").encode())
        await js.publish(INSTALL_CLUSTER, InstallCluster(request_id=ok, spec_ref=good).to_bytes())
        assert (await watch.wait_for(lambda e: e.data.get("requestId") == ok, timeout=30)).subject == PLAN_CREATED


async def test_get_blob_refuses_from_the_recorded_size_and_counts_the_chunks(nats_client):
    js = nats_client.jetstream()
    ref = await put_blob(js, "bke-blobs", "specs/ten.bin", b"0123456789")
    assert await get_blob(js, ref, limit=10) == b"0123456789"
    with pytest.raises(BlobTooLarge, match="the object is 10 bytes; the limit is 9"):
        await get_blob(js, ref, limit=9)
    sink = _Capped(4)  # a writer whose recorded size lies is cut off by the chunks it sends
    sink.write(b"0123")
    with pytest.raises(BlobTooLarge, match="more than 4 bytes"):
        sink.write(b"4")
