"""The certs service's renewal handlers and automatic renewal against the real Redis of the
session fixture, called as plain functions (the bus is the e2e tests' job): one event per
request, an answer replayed on redelivery, one operation per cluster, a tick that renews only
what is due and only when the cluster is idle."""
from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest
import redis.asyncio as aioredis

from bke.contracts.certs import CERTS_FAILED, CERTS_RENEWED, RENEW_CERTS, CertsRenewed, RenewCerts
from bke.contracts.rotation import RotationChanged, RotationView
from bke.core.pki import IssueOptions, cert_info
from bke.adapters.pki.store_redis import RedisPkiStore
from bke.core.secrets import SecretBox
from bke.adapters.state.operation_slot import claim_operation, release_operation
from bke.adapters.state.keys.planner import clusters_index
from bke_certs.autorenew import AutoRenewer
from bke.adapters.bus.handler import typed
from bke_certs.handlers import CertsHandlers
from bke_certs.service_core import ensure_cluster_certs

from .test_certs_redis import _plan

pytestmark = pytest.mark.integration
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


@pytest.fixture
async def certs(redis_client: aioredis.Redis, redis_url: str):
    raw = aioredis.from_url(redis_url)
    box = SecretBox(os.urandom(32))
    await ensure_cluster_certs(_plan(), RedisPkiStore(raw), NOW, box, options=IssueOptions(procs=1))
    sent: list[tuple[str, bytes]] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body))

    clock = [NOW + timedelta(days=1)]
    h = CertsHandlers(redis=raw, box_factory=lambda: box, api_box_factory=lambda: box, publish=publish,
                      now=lambda: clock[0])
    try:
        yield h, sent, clock
    finally:
        await raw.aclose()


def _req(rid: str, **kw) -> bytes:
    return RenewCerts(request_id=rid, cluster="big", **kw).to_bytes()


async def _rotation(h: CertsHandlers, rid: str, status: str) -> None:
    view = RotationView(request_id=rid, status=status, certificates=[], done=0, total=0, started_at="t", nodes=[])
    await typed(RotationChanged, h.on_rotation_changed, h.publish)(RotationChanged(cluster="big", at="t", rotation=view).to_bytes())


async def _renew(h: CertsHandlers, body: bytes) -> None:
    """The bytes through the service's wiring, as the bus delivers them."""
    await typed(RenewCerts, h.on_renew, h.publish)(body)


async def test_one_event_per_request_replayed_on_redelivery_and_one_operation_at_a_time(certs):
    h, sent, _ = certs
    await _renew(h, _req("r1", names=["apiserver"]))
    [(subject, body)] = sent
    ev = CertsRenewed.model_validate_json(body)
    assert subject == CERTS_RENEWED and ev.origin == "cli"
    assert sorted(c.instance for c in ev.certificates) == [f"apiserver@m{i}" for i in range(1, 4)]
    assert all(c.nodes == [c.instance.split("@")[1]] for c in ev.certificates)
    serial = cert_info((await RedisPkiStore(h.redis).load("big", None)).materials["apiserver@m1"].cert).serial
    assert format(serial, "x") == next(c.serial for c in ev.certificates if c.instance == "apiserver@m1")

    await _renew(h, _req("r1", names=["apiserver"]))  # a redelivery: the same answer, nothing renewed again
    assert sent[1] == (CERTS_RENEWED, body)
    again = cert_info((await RedisPkiStore(h.redis).load("big", None)).materials["apiserver@m1"].cert).serial
    assert again == serial

    await _renew(h, _req("r2", names=["admin.conf"]))  # r1's rotation has not finished
    assert sent[2][0] == CERTS_FAILED and json.loads(sent[2][1])["reason"] == (
        "certificate rotation r1 of big is running: one operation per cluster")  # the slot its renewal claimed
    await _rotation(h, "r1", "Running")
    await _rotation(h, "r3", "Failed")  # a rotation the dispatcher refused does not hide the running one
    await _renew(h, _req("r4", names=["admin.conf"]))
    assert "certificate rotation r1 of big is running" in json.loads(sent[3][1])["reason"]
    await _rotation(h, "r1", "Succeeded")
    await _renew(h, _req("r5", names=["admin.conf"]))
    assert sent[4][0] == CERTS_RENEWED and len(CertsRenewed.model_validate_json(sent[4][1]).certificates) == 5  # m1..m5

    await _rotation(h, "r5", "Succeeded")
    for bad, why in ((["nope"], "no certificate 'nope'"), (["ca"], "CA rotation is not done by renew")):
        await _renew(h, _req(f"bad-{bad[0]}", names=bad))
        assert sent[-1][0] == CERTS_FAILED and why in json.loads(sent[-1][1])["reason"]


async def test_automatic_renewal_renews_what_is_due_only_when_idle(certs):
    h, sent, clock = certs
    auto = AutoRenewer(h.redis, h.store, h.ops, h.publish, lambda: clock[0], interval_s=0, within_days=30)
    assert await auto.tick() == {}  # no cluster in the index yet
    await h.redis.sadd(clusters_index(), "big")
    assert (await auto.tick())["big"].action == "none"  # nothing expires within 30 days
    clock[0] = NOW + timedelta(days=340)
    assert (await auto.tick())["big"].reason == "the install is not known to have finished"
    await h.ops.set_install("big", "Succeeded")
    assert (await claim_operation(h.redis, "big", "upgrade", "u1", "t")).won  # another operation runs
    busy = (await auto.tick())["big"]
    assert (busy.action, busy.reason) == ("skip", "upgrade u1 of big is running: one operation per cluster") and not sent
    await release_operation(h.redis, "big", "upgrade", "u1")
    decided = await auto.tick()
    assert decided["big"].action == "renew" and len(decided["big"].due) == 65 - 7
    [(subject, body)] = sent
    req = RenewCerts.model_validate_json(body)
    assert subject == RENEW_CERTS and req.origin == "auto" and req.within_days == 30
    assert req.request_id == "auto-20270204T120000Z"
    assert (await auto.tick())["big"].action == "skip" and len(sent) == 1  # waiting: not asked twice

    await _renew(h, body)  # the same path as `bke certs renew`
    ev = CertsRenewed.model_validate_json(sent[-1][1])
    assert ev.origin == "auto" and len(ev.certificates) == 65 - 7
    await _rotation(h, req.request_id, "Succeeded")
    assert (await auto.tick())["big"].action == "none"  # renewed: nothing due any more


async def test_an_upgrades_renewal_by_instance_does_not_hold_the_cluster_for_a_rotation(certs):
    """The upgrader asks by instance id with origin upgrade and delivers the files itself: no
    rotation follows, so the renewal must not leave the cluster waiting for one."""
    h, sent, _ = certs
    await _renew(h, _req("upgrade-u1", names=["apiserver@m1", "scheduler.conf@m4"], origin="upgrade"))
    [(subject, body)] = sent
    ev = CertsRenewed.model_validate_json(body)
    assert subject == CERTS_RENEWED and ev.origin == "upgrade"
    assert {c.instance: c.nodes for c in ev.certificates} == {"apiserver@m1": ["m1"], "scheduler.conf@m4": ["m4"]}
    await _renew(h, _req("r2", names=["admin.conf"]))  # not refused: nothing waits for a rotation
    assert sent[1][0] == CERTS_RENEWED, sent[1]


async def test_an_upgrades_renewal_takes_the_target_releases_subject(certs):
    """The split example is planned at 1.33 (the group); an upgrade into 1.37 names its release:
    apiserver-kubelet-client comes back without kubeadm:cluster-admins (kubeadm#3310: what
    `kubeadm upgrade apply` does), the other renewed rows keep their subject; a renewal without
    a release (`bke certs renew`) keeps the stored one, as `kubeadm certs renew` does."""
    h, sent, _ = certs
    store = RedisPkiStore(h.redis)
    before = (await store.load("big", None)).materials
    assert cert_info(before["apiserver-kubelet-client@m1"].cert).o == ("kubeadm:cluster-admins",)
    await _renew(h, _req("upgrade-u2", names=["apiserver-kubelet-client@m1", "admin.conf@m1"], origin="upgrade",
                         kubernetes_version="v1.37.0"))
    assert sent[-1][0] == CERTS_RENEWED, sent[-1]
    after = (await store.load("big", None)).materials
    kc = cert_info(after["apiserver-kubelet-client@m1"].cert)
    assert kc.o == () and kc.cn == "kube-apiserver-kubelet-client"
    assert kc.serial != cert_info(before["apiserver-kubelet-client@m1"].cert).serial
    assert cert_info(after["apiserver-kubelet-client@m2"].cert).o == ("kubeadm:cluster-admins",)  # not asked
    await _renew(h, _req("r3", names=["apiserver-kubelet-client@m2"]))  # the CLI's: no release named
    assert cert_info((await store.load("big", None)).materials["apiserver-kubelet-client@m2"].cert).o == (
        "kubeadm:cluster-admins",)
