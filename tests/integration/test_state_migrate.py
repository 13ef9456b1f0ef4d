"""Stored-data conversion against a real Redis, from a fixture of the previous form.

tests/fixtures/state/v0/seed.json holds one lab cluster's keys (install + a rotation) as the code
before record versions wrote them (commit 71dcd21; tests/fixtures/state/dump.py). Loaded here,
converted by `ensure_current`, then read by today's readers; a second run changes no byte; a
newer record is refused by the conversion and by the readers; two converting processes and a
writer racing a conversion convert each record exactly once."""
from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest

from bke.core.etcdsnap.restore_run import RestoreRun
from bke.core.upgrade.run import UpgradeRun
from bke_dispatcher.ops.join.decide import Join
from bke_dispatcher.ops.join.run import JoinStore
from bke_dispatcher.ops.removal.decide import Removal
from bke_dispatcher.ops.removal.run import RemovalStore
from bke_dispatcher.ops.reset.decide import Reset
from bke_dispatcher.ops.reset.run import ResetStore
from bke_upgrader.ops.restore.store import RestoreStore
from bke_upgrader.store import UpgradeStore
import redis
import redis.asyncio as aioredis

from bke.contracts.status import GetStatus
from bke.adapters.pki.store_redis import RedisPkiStore
from bke.adapters.state.conversion import CONVERTERS, Converter, register
from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.dispatcher import install_key, join_key, join_results_key
from bke.adapters.state.migrate import MigrationBusy, ensure_current, known_clusters
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.adapters.state.operation_slot import claim_operation, operation_holder
from bke.adapters.state.plans import PlanCache, RedisPlanStore
from bke.adapters.state.state_init import StateInit, ensure_state
from bke.core.secrets import box_for
from bke.core.secrets.record_signing import WRITERS
from bke.core.state.schema import RECORDS, RecordKind, StoredVersionTooNew, record_kind
from bke_certs.operations import OpsStore
from bke_cli.main import main as bke
from bke_dispatcher.ops.rotation.run import RotationStore
from bke_dispatcher.state import DispatcherState
from bke_dispatcher.status import StatusReader
from bke_renderer.store_redis import RedisRenderStore

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).parents[1] / "fixtures" / "state" / "v0" / "seed.json"
C = "seed"


async def load_fixture(r: aioredis.Redis) -> dict:
    doc = json.loads(FIXTURE.read_text())
    async with r.pipeline(transaction=True) as pipe:
        for e in doc["keys"]:
            {"string": lambda k, v: pipe.set(k, v), "hash": lambda k, v: pipe.hset(k, mapping=v),
             "set": lambda k, v: pipe.sadd(k, *v)}[e["type"]](e["key"], e["value"])
        await pipe.execute()
    assert state_init(r).signed_now == (("plan", 1), ("render", 4))  # the fixture's BKE signed nothing
    return doc


def state_init(r: aioredis.Redis) -> StateInit:
    """`bke state init` after BKE's upgrade, as the admin: the plan and render writers' keys made,
    and what the older BKE stored unsigned signed with them (bke.adapters.state.sign_unsigned)."""
    kw = r.connection_pool.connection_kwargs
    sync = redis.Redis(host=kw["host"], port=kw["port"], db=kw.get("db", 0), username=kw.get("username"),
                       password=kw.get("password"))
    try:
        return ensure_state(sync, None, record_boxes={w: box_for(w) for w in WRITERS})
    finally:
        sync.close()


async def dump(r: aioredis.Redis) -> dict:
    """Every key's type, value and TTL: what 'changes nothing' is measured against."""
    out = {}
    async for k in r.scan_iter(match="bke:*"):
        t = await r.type(k)
        v = {"string": r.get, "hash": r.hgetall, "set": r.smembers}[t](k)
        out[k] = (t, await v, await r.ttl(k))
    return out


async def read_everything(r: aioredis.Redis) -> None:
    """Today's readers, each on its record."""
    plan = await RedisPlanStore(r).load(C)
    assert plan.cluster == C and len(plan.nodes) == 4
    assert (await PlanCache(r).load(C)).cluster == C
    snap = await RedisPkiStore(r).load(C, None)
    assert snap is not None and snap.manifest.cluster == C and snap.materials
    rendered = await RedisRenderStore(r).load(C)
    assert rendered is not None and {n.hostname for n in rendered.nodes} == {"master1", "master2", "master3", "node1"}
    assert (await RedisNodeFiles(r).get(C, "certs", "master1"))
    state = DispatcherState(r)
    assert (await state.install(C))["status"] == "Succeeded"
    assert set(await state.nodes(C)) == {"master1", "master2", "master3", "node1"}
    assert (await state.all_commands(C, "etcd")).keys() == {"master1", "master2", "master3"}
    rot = await RotationStore(r).load(C)
    assert rot is not None and rot.status == "Succeeded" and len(rot.nodes) == 3
    assert (await OpsStore(r).view(C)).rotation == "Succeeded"


async def test_the_previous_form_converts_then_reads_and_a_second_run_changes_nothing(
        redis_client: aioredis.Redis) -> None:
    await load_fixture(redis_client)
    await read_everything(redis_client)  # version 0 is read as is: the forms are the same (readable_from 0)
    assert await known_clusters(redis_client) == [C]

    dry = await ensure_current(redis_client, C, dry_run=True)
    before = await dump(redis_client)
    assert [r.kind for r in dry.converted] == ["plan", "certs", "render", "install", "rotation"]
    assert await dump(redis_client) == before  # a dry run writes nothing

    report = await ensure_current(redis_client, C)
    by_kind = {r.kind: r for r in report.results}
    assert [r.kind for r in report.converted] == ["plan", "certs", "render", "install", "rotation"]
    assert by_kind["pki"].found == 1 and not by_kind["pki"].converted  # versioned since its first form
    assert all(r.writes == 1 and r.found == 0 and r.header for r in report.converted)  # one header write each
    assert await redis_client.hget(plan_meta_key(C), "schemaVersion") == "1"
    assert await redis_client.hget(install_key(C), "schemaVersion") == "1"
    assert json.loads(await redis_client.get(f"bke:{C}:render:meta"))["schemaVersion"] == 1
    after = await dump(redis_client)
    changed = sorted(k for k in after if after[k] != before[k])
    assert changed == [f"bke:{C}:{k.slot.key}" for k in sorted(RECORDS, key=lambda k: k.slot.key) if k.first == 0]
    await read_everything(redis_client)

    again = await ensure_current(redis_client, C)
    assert again.converted == () and all(r.found in (None, 1) for r in again.results)
    assert await dump(redis_client) == after


JOIN_V1 = Path(__file__).parents[1] / "fixtures" / "state" / "join-v1" / "seed.json"


async def test_a_version_1_join_is_read_then_converted_to_the_current_form_with_one_write(redis_client: aioredis.Redis) -> None:
    """join 1 -> 4 (etcd joins, the agents' clock, the held ports added): a join stored mid-way by
    the previous form is read as is, converted by one SET of its record (its agents' answers
    untouched), read again, and a second run changes nothing."""
    await load_fixture(redis_client)
    doc = json.loads(JOIN_V1.read_text())
    for e in doc["keys"]:
        if e["type"] == "string":
            await redis_client.set(e["key"], e["value"])
        elif e["type"] == "hash":
            await redis_client.hset(e["key"], mapping=e["value"])
        else:
            await redis_client.sadd(e["key"], *e["value"])
    store = JoinStore(redis_client)
    before = await store.load(C)
    assert before is not None and before.etcd_joins == [] and before.nodes[0].command_id == "seed/join@j1/node1/1"
    results = await redis_client.hgetall(join_results_key(C))
    report = await ensure_current(redis_client, C, kinds=[record_kind("join")])
    [res] = report.converted
    assert (res.kind, res.found, res.writes) == ("join", 1, 1)
    stored = json.loads(await redis_client.get(join_key(C)))
    assert stored["schemaVersion"] == 4 and stored["etcd_joins"] == [] and stored["agents_since"] == "" and stored["held_ports"] == {}
    assert await store.load(C) == before and await redis_client.hgetall(join_results_key(C)) == results
    assert (await ensure_current(redis_client, C, kinds=[record_kind("join")])).converted == ()


READERS = {
    "plan": [lambda r: RedisPlanStore(r).load(C), lambda r: PlanCache(r).load(C)],
    "pki": [lambda r: RedisPkiStore(r).load(C, None)],
    "certs": [lambda r: OpsStore(r).view(C)],
    "render": [lambda r: RedisRenderStore(r).load(C), lambda r: RedisRenderStore(r).load_node(C, "master1")],
    "install": [lambda r: DispatcherState(r).install(C), lambda r: StatusReader(r, PlanCache(r)).read(GetStatus(cluster=C))],
    "rotation": [lambda r: RotationStore(r).load(C)],
    "upgrade": [lambda r: UpgradeStore(r).load(C)],
    "etcd-restore": [lambda r: RestoreStore(r).load(C)],
    "reset": [lambda r: ResetStore(r).load(C)],
    "join": [lambda r: JoinStore(r).load(C)],
    "removal": [lambda r: RemovalStore(r).load(C)],
    "operation": [lambda r: operation_holder(r, C),
                  lambda r: claim_operation(r, C, "upgrade", "u9", "t0")],
}


async def _restore_record(r: aioredis.Redis) -> None:
    """The fixture predates restores: a restore record as the upgrader writes it."""
    run = RestoreRun(restore_id="x1", cluster=C, etcd_cluster="etcd-data", snapshot_id="s1", sha256="0" * 64, size=1,
                     started_at="t0", stages=[])
    await r.set(f"bke:{C}:etcd-restore", run.to_json())


async def _operation_record(r: aioredis.Redis) -> None:
    """The fixture predates the operation slot: a slot as a claim writes it."""
    assert (await claim_operation(r, C, "reset", "r1", "t0")).won


async def _reset_record(r: aioredis.Redis) -> None:
    """The fixture predates resets: a reset record as the dispatcher writes it."""
    await r.set(f"bke:{C}:reset", Reset(request_id="r1", cluster=C, delete=False, snapshots=[], nodes=[],
                                        started_at="t0").to_json())


async def _membership_record(r: aioredis.Redis, kind: str) -> None:
    """The fixture predates joins and removals: their records as the dispatcher writes them."""
    if kind == "join":
        await r.set(f"bke:{C}:join", Join(request_id="j1", cluster=C, plan_digest="0" * 64, nodes=[], started_at="t0").to_json())
    else:
        await r.set(f"bke:{C}:removal", Removal(request_id="r1", cluster=C, nodes=[], identities=[], started_at="t0").to_json())


async def _upgrade_record(r: aioredis.Redis) -> None:
    """The fixture predates upgrades: an upgrade record as the upgrader writes it."""
    run = UpgradeRun(request_id="u1", cluster=C, current={"kubernetes": "1.33.2", "etcd": "3.5.1", "containerd": "2.1.1"},
                     target={"kubernetes": "1.34.1", "etcd": "3.5.2", "containerd": "2.1.1"}, steps=[], started_at="t0")
    await r.set(f"bke:{C}:upgrade", run.to_json())


async def bump(r: aioredis.Redis, kind: RecordKind) -> int:
    """Write a version one past what this code knows into the record's header."""
    newer, key = kind.current + 1, f"bke:{C}:{kind.slot.key}"
    if kind.slot.form == "hash":
        await r.hset(key, kind.slot.field, str(newer))
    else:
        await r.set(key, json.dumps({**json.loads(await r.get(key)), kind.slot.field: newer}))
    return newer


@pytest.mark.parametrize("kind", RECORDS, ids=lambda k: k.name)
async def test_a_newer_record_is_refused_by_the_conversion_and_by_its_readers(redis_client: aioredis.Redis,
                                                                              kind: RecordKind) -> None:
    assert READERS.keys() == {k.name for k in RECORDS}
    await load_fixture(redis_client)
    if kind.name == "upgrade":
        await _upgrade_record(redis_client)
    if kind.name == "etcd-restore":
        await _restore_record(redis_client)
    if kind.name == "reset":
        await _reset_record(redis_client)
    if kind.name in ("join", "removal"):
        await _membership_record(redis_client, kind.name)
    if kind.name == "operation":
        await _operation_record(redis_client)
    newer = await bump(redis_client, kind)
    before = await dump(redis_client)
    with pytest.raises(StoredVersionTooNew, match=f"version {newer}, newer than this BKE"):
        await ensure_current(redis_client, C, kinds=[kind])
    assert await dump(redis_client) == before  # never converted down, nothing written
    for read in READERS[kind.name]:
        with pytest.raises(StoredVersionTooNew, match=f"{kind.name} form version {newer}, newer than this BKE reads"):
            await read(redis_client)


async def test_a_version_2_join_is_read_as_is_then_converted_to_version_4(redis_client: aioredis.Redis) -> None:
    """tests/fixtures/state/join-v2/seed.json (a join waiting for an agent, as version 2 wrote
    it): read directly, converted with one write (agents_since and held_ports added), read again the same."""
    doc = json.loads((FIXTURE.parents[1] / "join-v2" / "seed.json").read_text())
    [entry] = doc["keys"]
    await redis_client.set(entry["key"], entry["value"])
    store = JoinStore(redis_client)
    before = await store.load(C)
    assert before is not None and before.agents_since == ""
    report = await ensure_current(redis_client, C, kinds=[record_kind("join")])
    [result] = report.converted
    assert (result.kind, result.found, result.writes) == ("join", 2, 1)
    stored = json.loads(await redis_client.get(entry["key"]))
    assert stored["schemaVersion"] == 4 and stored["agents_since"] == "" and stored["held_ports"] == {}
    assert await store.load(C) == before
    assert (await ensure_current(redis_client, C, kinds=[record_kind("join")])).converted == ()


async def test_members_without_their_header_are_converted_and_no_header_is_invented(
        redis_client: aioredis.Redis) -> None:
    # agents provisioned before the cluster's plan: the certs record's members exist, its header not
    await load_fixture(redis_client)
    await redis_client.delete(f"bke:{C}:certs:ops")
    result = {r.kind: r for r in (await ensure_current(redis_client, C)).results}["certs"]
    assert (result.found, result.header, result.writes) == (0, False, 0)
    assert not await redis_client.exists(f"bke:{C}:certs:ops")


def _v2_install(calls: list[str]) -> tuple[object, dict]:
    """A made-up version 2 of the phase state: per-node `step` renamed `stepName`; `calls`
    counts the conversions computed."""
    def rename(rec: dict) -> dict:
        calls.append("x")
        node = {n: json.dumps({("stepName" if k == "step" else k): v for k, v in json.loads(doc).items()})
                for n, doc in rec["node"].items()}
        return {**rec, "node": node}

    kind = dataclasses.replace(record_kind("install"), current=2)
    return kind, {**CONVERTERS, **register(Converter("install", 1, "rename step", rename, ("node",)))}


async def test_two_processes_convert_each_record_once(redis_url: str, redis_client: aioredis.Redis) -> None:
    await load_fixture(redis_client)
    calls: list[str] = []
    kind, reg = _v2_install(calls)
    clients = [aioredis.from_url(redis_url, decode_responses=True) for _ in range(2)]
    try:
        reports = await asyncio.gather(*(ensure_current(c, C, kinds=[kind], registry=reg) for c in clients))
    finally:
        for c in clients:
            await c.aclose()
    assert sum(len(rep.converted) for rep in reports) == 1  # the loser found it current
    assert await redis_client.hget(install_key(C), "schemaVersion") == "2"
    node = json.loads(await redis_client.hget(f"bke:{C}:node", "master1"))
    assert "stepName" in node and "step" not in node


async def test_a_write_during_the_conversion_makes_it_read_again(redis_url: str, redis_client: aioredis.Redis) -> None:
    await load_fixture(redis_client)
    await ensure_current(redis_client, C)  # at version 1
    calls: list[str] = []
    kind, reg = _v2_install(calls)
    writer = redis.Redis.from_url(redis_url, decode_responses=True)
    step = reg[("install", 1)]

    def racing(rec: dict) -> dict:
        if not calls:  # a dispatcher writes a node's status between the read and the write
            writer.hset(f"bke:{C}:node", "master1", json.dumps({"phase": "x", "status": "Running", "step": "late"}))
        return step.fn(rec)

    reg[("install", 1)] = dataclasses.replace(step, fn=racing)
    try:
        report = await ensure_current(redis_client, C, kinds=[kind], registry=reg)
    finally:
        writer.close()
    assert len(calls) == 2 and report.converted  # computed twice, written once
    node = json.loads(await redis_client.hget(f"bke:{C}:node", "master1"))
    assert node == {"phase": "x", "status": "Running", "stepName": "late"}  # the late write converted too


async def test_bke_state_migrate_reports_and_refuses(redis_url: str, redis_client: aioredis.Redis, monkeypatch,
                                                     capsys) -> None:
    monkeypatch.delenv("BKE_REDIS_URL", raising=False)
    monkeypatch.delenv("BKE_SECRET_KEY_FILE", raising=False)  # a conversion reads no secret
    await load_fixture(redis_client)
    assert await asyncio.to_thread(bke, ["state", "migrate", "--redis", redis_url, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "seed install: would convert v0 -> v1, 1 write(s): install: add schemaVersion" in out
    assert "seed pki: v1, current" in out and "seed: 5 record(s) would convert" in out
    assert await asyncio.to_thread(bke, ["state", "migrate", "--redis", redis_url]) == 0
    assert "seed: 5 record(s) converted" in capsys.readouterr().out
    assert await asyncio.to_thread(bke, ["state", "migrate", "seed", "--redis", redis_url]) == 0
    assert "seed: every record current" in capsys.readouterr().out
    await redis_client.hset(install_key(C), "schemaVersion", "3")
    assert await asyncio.to_thread(bke, ["state", "migrate", "--redis", redis_url]) == 2
    assert "install record is version 3, newer than this BKE knows (1)" in capsys.readouterr().err


async def test_a_rewritten_member_keeps_its_expiry_and_a_busy_record_gives_up(redis_url: str,
                                                                             redis_client: aioredis.Redis) -> None:
    await load_fixture(redis_client)
    await ensure_current(redis_client, C)
    renewal = (await redis_client.keys(f"bke:{C}:certs:renewal:*"))[0]
    await redis_client.expire(renewal, 3600)

    def tag(rec: dict) -> dict:  # a made-up version 2: renewal answers gain a field
        return {k: (json.dumps({**json.loads(v), "v2": True}) if k.startswith("certs:renewal:") else v)
                for k, v in rec.items()}

    kind = dataclasses.replace(record_kind("certs"), current=2)
    reg = {**CONVERTERS, **register(Converter("certs", 1, "tag", tag, ("certs:renewal:*",)))}
    assert (await ensure_current(redis_client, C, kinds=[kind], registry=reg)).converted
    assert json.loads(await redis_client.get(renewal))["v2"] is True
    assert 3500 < await redis_client.ttl(renewal) <= 3600  # SET KEEPTTL: the answer still expires

    sync = redis.Redis.from_url(redis_url)

    def always_racing(rec: dict) -> dict:
        sync.hset(f"bke:{C}:install", "message", str(len(rec)))  # a writer that never stops
        return rec

    kind = dataclasses.replace(record_kind("install"), current=2)
    reg = {**CONVERTERS, **register(Converter("install", 1, "racing", always_racing))}
    try:
        with pytest.raises(MigrationBusy, match="kept changing"):
            await ensure_current(redis_client, C, kinds=[kind], registry=reg)
    finally:
        sync.close()
    assert await redis_client.hget(install_key(C), "schemaVersion") == "1"


async def test_bke_state_records_prints_the_table(capsys) -> None:
    assert await asyncio.to_thread(bke, ["state", "records"]) == 0
    out = capsys.readouterr().out
    for k in RECORDS:
        assert f"{k.name} (version {k.current};" in out and f"version: {k.slot.key} " in out
