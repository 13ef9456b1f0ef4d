"""The certs service core against the real Redis of the session fixture.

At-rest encryption (no PEM private key in any raw stored byte), idempotence (a second ensure
leaves every stored byte and the version alone), SAN refresh, node bundles, renewal of what
expires, the conflict guard, and `bke certs check-expiration --cluster` answered from the same store over the bus.
"""
from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis.asyncio as aioredis
import yaml
from bke_certs.service_core import ensure_cluster_certs, node_bundle, renew_requested
from bke.adapters.pki.store_redis import RedisPkiStore, pki_keys
from bke.adapters.state.keys.common import epoch_key
from bke.adapters.state.keys.certs import pki_index

from bke.core.pki import IssueOptions, Snapshot, StoreConflict, cert_info
from bke.core.pki.instances import node_file_refs
from bke.core.plan import Plan, plan_spec_text
from bke.core.secrets import SecretBox, create_key_file
from bke_cli.main import main

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SPLIT = ROOT / "examples" / "split-etcd.yaml"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
SERIAL = IssueOptions(procs=1)


def _plan(edit=None) -> Plan:  # type: ignore[no-untyped-def]
    docs = list(yaml.safe_load_all(SPLIT.read_text()))
    if edit:
        edit(docs)
    outcome = plan_spec_text(yaml.safe_dump_all(docs, sort_keys=False))
    assert outcome.plan is not None, outcome.errors
    return outcome.plan


@pytest.fixture
async def raw(redis_client: aioredis.Redis, redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A bytes client (no decoding) on the database redis_client just emptied."""
    client = aioredis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


async def _dump(client: aioredis.Redis) -> dict[bytes, object]:
    out: dict[bytes, object] = {}
    for key in sorted(await client.keys("*")):
        if key == epoch_key().encode():  # the fixture's (`bke state init`), not the PKI's
            continue
        kind = await client.type(key)
        if kind == b"set":  # the certs service's index of clusters (bke:pki-clusters)
            out[key] = await client.smembers(key)
            continue
        out[key] = await (client.hgetall(key) if kind == b"hash" else client.get(key))
    return out


async def test_ensure_stores_keys_encrypted_and_is_idempotent(raw: aioredis.Redis,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    box = SecretBox(os.urandom(32))
    store = RedisPkiStore(raw)
    caplog.set_level("DEBUG")
    report = await ensure_cluster_certs(_plan(), store, NOW, box, options=SERIAL)
    logged = [r for r in caplog.records if r.name.startswith("bke")]
    assert any(getattr(r, "cluster", None) == "big" and getattr(r, "operation", None) == "ensure_certs"
               for r in logged)
    assert not any("PRIVATE KEY" in r.getMessage() or "BEGIN" in r.getMessage() for r in logged)
    assert len(report.issued) == 65
    dump = await _dump(raw)
    keys = pki_keys("big")
    assert set(dump) == {k.encode() for k in keys.values()} | {pki_index().encode()}
    assert dump[pki_index().encode()] == {b"big"}
    for key, value in dump.items():  # raw bytes as stored: no PEM key, not even base64-wrapped
        blob = b"".join(k + v for k, v in value.items()) if isinstance(value, dict) else b"".join(value) if isinstance(value, set) else value
        assert b"PRIVATE KEY" not in blob and b"LS0tLS1CRUdJTiBQUklWQVRF" not in blob, key
    certs, enc = dump[keys["certs"].encode()], dump[keys["keys"].encode()]
    assert set(certs) == set(enc) and len(certs) == 65  # every instance has a key, encrypted
    assert all(v.startswith(b"-----BEGIN ") for v in certs.values())
    assert box.decrypt(base64.b64decode(enc[b"etcd-ca"]), b"big/etcd-ca").startswith(b"-----BEGIN PRIVATE KEY")

    again = await ensure_cluster_certs(_plan(), store, NOW + timedelta(days=1), box, options=SERIAL)
    assert again.issued == [] and again.reissued == [] and len(again.reused) == 65 and not again.changed
    assert await _dump(raw) == dump  # same bytes, same version


async def test_san_refresh_and_bundles(redis_client: aioredis.Redis) -> None:
    box = SecretBox(os.urandom(32))
    store = RedisPkiStore(redis_client)  # a decode_responses=True client works as well
    await ensure_cluster_certs(_plan(), store, NOW, box, options=SERIAL)

    def more_sans(docs):  # type: ignore[no-untyped-def]
        docs[0]["spec"]["clusterConfig"]["cluster"]["apiServer"]["certSANs"].append("10.9.9.9")

    plan = _plan(more_sans)
    report = await ensure_cluster_certs(plan, store, NOW, box, options=SERIAL)
    assert sorted((r.instance, r.reason) for r in report.reissued) == [
        (f"apiserver@m{i}", "SANs changed") for i in (1, 2, 3)]
    assert sorted(report.changed_nodes) == ["m1", "m2", "m3"]
    files = await node_bundle(plan, store, "m2", box)
    assert [f.path for f in files] == [r.path for r in node_file_refs(plan)["m2"]]
    by_path = {f.path: f for f in files}
    assert "10.9.9.9" in cert_info(by_path["/etc/kubernetes/pki/apiserver.crt"].content).ips
    assert by_path["/etc/kubernetes/pki/apiserver.key"].secret
    assert by_path["/etc/kubernetes/admin.conf"].content.startswith(b"apiVersion: v1\n")
    worker = await node_bundle(plan, store, "worker4", box)
    assert [f.path for f in worker] == ["/etc/kubernetes/kubelet.conf", "/etc/kubernetes/pki/ca.crt"]


async def test_renew_expiring_renews_leaves_once(raw: aioredis.Redis) -> None:
    box = SecretBox(os.urandom(32))
    store = RedisPkiStore(raw)
    await ensure_cluster_certs(_plan(), store, NOW, box, options=SERIAL)
    before = await _dump(raw)
    assert await renew_requested("big", store, NOW + timedelta(days=100), box, names=None, threshold=timedelta(days=30), request_id="r", options=SERIAL) == []
    assert await _dump(raw) == before

    later = NOW + timedelta(days=340)
    renewed = await renew_requested("big", store, later, box, names=None, threshold=timedelta(days=30), request_id="r", options=SERIAL)
    assert len(renewed) == 65 - 7 and not any(r.name.endswith("-ca") or r.name == "sa" for r in renewed)
    kubelet = next(r for r in renewed if r.instance == "kubelet.conf@worker2")
    assert kubelet.nodes == ["worker2"] and kubelet.not_after == later + timedelta(days=365)
    snap = await store.load("big", box)
    assert snap.materials["ca"].cert == (await RedisPkiStore(raw).load("big", None)).materials["ca"].cert
    assert cert_info(snap.materials["apiserver@m3"].cert).not_after == later + timedelta(days=365)
    assert await renew_requested("big", store, later, box, names=None, threshold=timedelta(days=30), request_id="r", options=SERIAL) == []


async def test_concurrent_save_is_a_conflict(raw: aioredis.Redis) -> None:
    box = SecretBox(os.urandom(32))
    store = RedisPkiStore(raw)
    await ensure_cluster_certs(_plan(), store, NOW, box, options=SERIAL)
    stale = await store.load("big", box)
    await renew_requested("big", store, NOW + timedelta(days=360), box, names=None, threshold=timedelta(days=30), request_id="r", options=SERIAL)
    with pytest.raises(StoreConflict):
        await store.save(Snapshot(stale.manifest, stale.materials), ["apiserver@m1"], box, stale.version)


async def test_cli_asks_the_certs_service_over_the_bus(raw: aioredis.Redis, nats_client, nats_url: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`check-expiration --cluster` never reads the certs service's store: the service answers on
    `bke.v1.certs.expiration.get` (its responder, on the real bus, over the real store), in pages."""
    import asyncio

    from bke.contracts.expiration import EXPIRATION_GET
    from bke_certs.expiration import ExpirationResponder

    keyfile = tmp_path / "at-rest.key"
    box = create_key_file(keyfile)
    await ensure_cluster_certs(_plan(), RedisPkiStore(raw), NOW, box, options=SERIAL)
    monkeypatch.delenv("BKE_SECRET_KEY_FILE", raising=False)
    responder = ExpirationResponder(RedisPkiStore(raw), lambda: NOW)
    asked: list[bytes] = []

    async def serve(msg) -> None:
        asked.append(msg.data)
        await msg.respond(await responder.answer(msg.data))

    sub = await nats_client.subscribe(EXPIRATION_GET, cb=serve)
    try:
        # the CLI runs its own event loop, so use a thread
        code = await asyncio.to_thread(main, ["certs", "check-expiration", "--cluster", "big", "--nats", nats_url])
        out, err = capsys.readouterr()
        assert code == 0, err
        assert any(line.startswith("kubelet.conf@worker1 ") for line in out.splitlines())
        rows = [line for line in out.splitlines() if "@" in line.split(" ", 1)[0]]
        # every per-node leaf (super-admin.conf is cluster-wide: no "@"), one page (CAs in their own table)
        assert len(rows) == 65 - 7 - 1 and len(asked) == 1
        garbage = await nats_client.request(EXPIRATION_GET, b"{}", timeout=5)
        assert b'"reason":"Invalid"' in garbage.data and b"cluster" in garbage.data
        paged = await nats_client.request(EXPIRATION_GET, b'{"cluster": "big", "offset": 55, "limit": 5}', timeout=5)
        assert b'"nextOffset":60' in paged.data and b'"total":64' in paged.data  # 65 issued: sa is a key pair
        code = await asyncio.to_thread(main, ["certs", "check-expiration", "--cluster", "nosuch", "--nats", nats_url])
        assert code == 2 and "no PKI stored for cluster 'nosuch'" in capsys.readouterr()[1]
    finally:
        await sub.unsubscribe()
    # renew --cluster never writes the store itself: it asks the certs service over the bus
    monkeypatch.delenv("BKE_NATS_URL", raising=False)
    old = (await RedisPkiStore(raw).load("big", None)).materials["front-proxy-client@m1"].cert
    code = await asyncio.to_thread(main, ["certs", "renew", "front-proxy-client", "--cluster", "big"])
    assert code == 2 and "--cluster needs --workdir DIR (a lab) or --nats URL" in capsys.readouterr()[1]
    assert (await RedisPkiStore(raw).load("big", None)).materials["front-proxy-client@m1"].cert == old


def _without(host: str):  # type: ignore[no-untyped-def]
    def edit(docs):  # type: ignore[no-untyped-def]
        docs[:] = [d for d in docs if not (d.get("kind") == "BKENode" and d["spec"]["hostname"] == host)]
    return edit


async def test_a_removed_worker_is_forgotten_keys_bundle_and_agent_and_the_pki_is_what_the_smaller_plan_builds(
        raw: aioredis.Redis) -> None:
    """After a removal (remove-nodes.finished), the certs service keeps nothing of the node: not
    its agent's provisioned key or accepted registration, not its sealed bundle, not its private
    keys; the PKI left is byte for byte what the ensure step builds for the plan without the
    node (it then changes nothing). A node whose removal did not finish keeps everything; a
    redelivery changes nothing."""
    from bke.contracts.membership import MembershipNode, RemoveNodesFinished
    from bke.adapters.state.keys.certs import certs_agents_key, provisioned_agents_key
    from bke.adapters.state.keys.node_files import node_files_key
    from bke_certs.removed_nodes import RemovedNodes

    box = SecretBox(os.urandom(32))
    store = RedisPkiStore(raw)
    plan = _plan()
    workers = [n.hostname for n in plan.nodes if n.roles == ["node"]][:2]
    gone, kept = workers
    await ensure_cluster_certs(plan, store, NOW, box, options=SERIAL)
    for key in (provisioned_agents_key("big"), certs_agents_key("big"), node_files_key("big", "certs")):
        await raw.hset(key, mapping={gone: "x", kept: "y"})  # what provisioning, registration and sealing stored
    owned = [i for i in (await raw.hkeys(pki_keys("big")["keys"])) if i.endswith(f"@{gone}".encode())]
    assert owned  # the node's own key pairs (its kubelet client's, at least)

    ev = RemoveNodesFinished(request_id="r1", cluster="big", status="Failed", reason="node kept: drain", at="t",
                             nodes=[MembershipNode(hostname=gone, status="Succeeded", stage="done"),
                                    MembershipNode(hostname=kept, status="Failed", stage="drain")])
    assert await RemovedNodes(raw, store).on_removed(ev) == []
    for key in (provisioned_agents_key("big"), certs_agents_key("big"), node_files_key("big", "certs")):
        assert await raw.hkeys(key) == [kept.encode()]
    for part in ("certs", "keys"):
        assert not [i for i in await raw.hkeys(pki_keys("big")[part]) if i.endswith(f"@{gone}".encode())]
        assert [i for i in await raw.hkeys(pki_keys("big")[part]) if i.endswith(f"@{kept}".encode())]
    after = await _dump(raw)
    assert gone.encode() not in after[pki_keys("big")["manifest"].encode()]

    assert await RemovedNodes(raw, store).on_removed(ev) == []  # a redelivery
    assert await _dump(raw) == after
    report = await ensure_cluster_certs(_plan(_without(gone)), store, NOW, box, options=SERIAL)
    assert report.issued == [] and report.reissued == [] and report.removed == [] and report.changed_nodes == []
    assert await _dump(raw) == after  # what the smaller plan builds: the same bytes, the same version
