"""Redis ACL users (bke.adapters.runtime.redis_acl) on the runtime the tests share (valkey-server, Redis 7
ACL rules): nobody gets in without a password, no service user may run FLUSHALL/FLUSHDB/KEYS/
CONFIG/DEBUG, each user reads and writes every secret exactly as the table says (directly or
from a Lua script), each reaches every key family it needs and may only read those it does not
own, and the two integrity checks hold: no service deletes `bke:epoch`, and only the plan's
writers rewrite a plan. That every service does its whole job under its user is shown by every
lab test (the lab gives each service its own user): tests/faults/test_state_loss.py and
tests/e2e."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from bke.contracts.agent import CommandResult
from bke.adapters.runtime import EmbeddedRuntime, redis_acl
from bke.adapters.state.keys.common import cluster_key, epoch_key
from bke.adapters.state.keys.planner import clusters_index, plan_replaceable_key, recent_plans_key, request_key
from bke.adapters.state.keys.plan import plan_key, plan_meta_key
from bke.adapters.state.keys.certs import (
    api_credentials_key, certs_agents_key, certs_lease_key, certs_ops_key, certs_renewal_key, pki_index,
    pki_key, provisioned_agents_key,
)
from bke.adapters.state.keys.node_files import node_files_digest_key, node_files_key, node_files_signatures_key
from bke.adapters.state.keys.renderer import (
    addon_manifests_key, recent_renders_key, render_meta_key, vrrp_password_key,
)
from bke.adapters.state.keys.dispatcher import (
    accepted_agents_key, addons_key, agents_key, command_key, command_key_acks_key, health_key, health_meta_key,
    health_pods_key, heartbeat_cgroup_key, heartbeat_key, heartbeat_runtime_key, inputs_key, install_key,
    installs_index, join_key, join_results_key, joins_index, node_labels_key, node_status_key, phase_key,
    refusals_key, removal_api_key, removal_key, removal_results_key, removals_index, reset_key,
    reset_results_key, resets_index, rotation_key, rotation_results_key, rotations_index, sealed_key,
)
from bke.adapters.state.keys.shared import lease_key, operation_key, paused_key
from bke.adapters.state.keys.upgrader import (
    etcd_restore_key, etcd_restore_results_key, etcd_restores_index, upgrade_certs_key, upgrade_key,
    upgrade_nodes_key, upgrade_results_key, upgrades_index,
)
from bke.adapters.state.keys.auth import auth_authority_key, auth_identities_key
from bke.adapters.state.keys.trust import (
    command_key_rollover_key, command_signing_key, command_signing_next_key, etcd_snapshot_key,
    record_signing_key,
)
from bke.adapters.state.client import redact_url
from bke.adapters.state.epoch import ensure_epoch, read_epoch
from bke.adapters.state.plans import RedisPlanStore
from bke.core.secrets.record_signing import RecordKeyError
from bke_upgrader.store import UpgradeStore

pytestmark = pytest.mark.integration
C = "seed"
SERVICES = ("planner", "certs", "renderer", "dispatcher", "upgrader")
ADMIN = "admin"
RENEWER = "renewer"  # `bke identities serve-renewals`: a user of its own, no service
USERS = (*SERVICES, RENEWER, ADMIN)
PKI_KEYS = pki_key(C, "keys")  # the CA keys (encrypted at rest, and still nobody else's)
VRRP = vrrp_password_key(C)

# Every secret and every key whose integrity the others rely on: who may read ("r") or also
# write ("rw") it; a user not named may not even read it. The table's reasons: bke.adapters.runtime.redis_acl.
TABLE: dict[str, dict[str, str]] = {
    PKI_KEYS: {"certs": "rw"},
    pki_key(C, "manifest"): {"certs": "rw"},
    command_signing_key(): {"dispatcher": "rw"},  # the upgrader sends its node commands through the dispatcher
    command_signing_next_key(): {},  # a rollover's next key: the admin's until the switch copies it
    command_key_rollover_key(): {"dispatcher": "r"},  # public: the dispatcher announces its next key
    command_key_acks_key(): {"dispatcher": "rw"},
    etcd_snapshot_key(): {"dispatcher": "r", "upgrader": "r"},
    auth_authority_key(): {RENEWER: "r"},  # the NATS operator's and account's seeds (sealed: the authority key)
    auth_identities_key(): {RENEWER: "rw"},
    VRRP: {"renderer": "rw"},
    api_credentials_key(C): {"certs": "rw", "dispatcher": "r", "upgrader": "r"},
    epoch_key(): {s: "r" for s in SERVICES if s != "upgrader"},
    plan_key(C): {"planner": "rw", "upgrader": "rw", "certs": "r", "renderer": "r", "dispatcher": "r"},
    plan_meta_key(C): {"planner": "rw", "upgrader": "rw", "certs": "r", "renderer": "r", "dispatcher": "r"},
    # the writers' signing keys every reader checks with: only the admin side writes them
    record_signing_key("plan"): {s: "r" for s in SERVICES},
    record_signing_key("render"): {s: "r" for s in SERVICES},
    node_files_signatures_key(C, "render"): {"renderer": "rw", "dispatcher": "r"},
    # the dispatcher's record of the agents it hears: the upgrader asks for their facts
    # (bke.contracts.agent_facts) and takes the answers it sends on as believed (bke_upgrader.results)
    accepted_agents_key(C): {"dispatcher": "rw"},
    heartbeat_key(C): {"dispatcher": "rw"},
    heartbeat_cgroup_key(C): {"dispatcher": "rw"},
    heartbeat_runtime_key(C): {"dispatcher": "rw"},
}
DANGEROUS = (("FLUSHALL",), ("FLUSHDB",), ("KEYS", "*"), ("CONFIG", "GET", "dir"), ("DEBUG", "SLEEP", "0"),
             ("SHUTDOWN",), ("ACL", "LIST"), ("MONITOR",))
SECRETS = (PKI_KEYS, command_signing_key(), command_signing_next_key(), etcd_snapshot_key(),
           auth_authority_key(), VRRP)

# what each service reads or writes (from the key table's owners and the services' code)
NEEDS: dict[str, dict[str, str]] = {
    "planner": {**dict.fromkeys([clusters_index(), recent_plans_key(), request_key("r1"), plan_key(C),
                                 plan_meta_key(C), plan_replaceable_key(C)], "rw"),
                **dict.fromkeys([epoch_key(), record_signing_key("plan")], "r")},
    "certs": {**dict.fromkeys([pki_index(), PKI_KEYS, pki_key(C, "certs"), certs_agents_key(C), certs_ops_key(C),
                               certs_renewal_key(C, "r1"), certs_lease_key(C, "renew"), node_files_key(C, "certs"),
                               node_files_digest_key(C, "certs"), operation_key(C), api_credentials_key(C),
                               provisioned_agents_key(C)], "rw"),
              **dict.fromkeys([epoch_key(), clusters_index(), plan_key(C), plan_meta_key(C),
                               record_signing_key("plan")], "r")},
    "renderer": {**dict.fromkeys([recent_renders_key(), addon_manifests_key(C), render_meta_key(C), VRRP,
                                  node_files_key(C, "render"), node_files_digest_key(C, "render"),
                                  node_files_signatures_key(C, "render")], "rw"),
                 **dict.fromkeys([epoch_key(), plan_key(C), plan_meta_key(C), record_signing_key("render")], "r")},
    "dispatcher": {**dict.fromkeys([installs_index(), rotations_index(), install_key(C), inputs_key(C),
                                    sealed_key(C), phase_key(C, "etcd"), command_key(C, "etcd"), node_status_key(C),
                                    lease_key(C, "etcd"), agents_key(C), accepted_agents_key(C), refusals_key(C),
                                    heartbeat_key(C), heartbeat_cgroup_key(C), heartbeat_runtime_key(C),
                                    addons_key(C), node_labels_key(C), health_key(C), health_meta_key(C),
                                    health_pods_key(C), rotation_key(C), rotation_results_key(C),
                                    paused_key(C, "dispatcher"), joins_index(), join_key(C), join_results_key(C),
                                    removals_index(), removal_key(C), removal_results_key(C), removal_api_key(C),
                                    resets_index(), reset_key(C), reset_results_key(C), operation_key(C),
                                    command_signing_key(), command_key_acks_key()], "rw"),
                   **dict.fromkeys([epoch_key(), plan_key(C), plan_meta_key(C), node_files_key(C, "render"),
                                    node_files_digest_key(C, "render"), node_files_signatures_key(C, "render"),
                                    record_signing_key("plan"), record_signing_key("render"), node_files_key(C, "certs"),
                                    node_files_digest_key(C, "certs"), addon_manifests_key(C),
                                    provisioned_agents_key(C), api_credentials_key(C), etcd_snapshot_key(),
                                    command_key_rollover_key()], "r")},
    "upgrader": {**dict.fromkeys([upgrades_index(), upgrade_key(C), upgrade_results_key(C), upgrade_nodes_key(C),
                                  upgrade_certs_key(C), paused_key(C, "upgrade"), cluster_key(C, "upgrade", "drain"),
                                  etcd_restores_index(), etcd_restore_key(C), etcd_restore_results_key(C),
                                  plan_key(C), plan_meta_key(C), operation_key(C), lease_key(C, "upgrade"),
                                  addons_key(C), node_labels_key(C), phase_key(C, "apply-labels")], "rw"),
                 **dict.fromkeys([provisioned_agents_key(C), addon_manifests_key(C),
                                  api_credentials_key(C), node_files_key(C, "certs"), node_files_digest_key(C, "certs"),
                                  etcd_snapshot_key(), record_signing_key("plan")], "r")},
    RENEWER: {auth_identities_key(): "rw", auth_authority_key(): "r"},
}


def _user(who: str) -> redis_acl.AclUser:
    name = redis_acl.ADMIN if who == ADMIN else redis_acl.PROCESS_USER[who]
    return next(u for u in redis_acl.USERS if u.name == name)


def _expected(key: str, who: str) -> str:
    return "rw" if who == ADMIN else TABLE[key].get(who, "")


def test_the_table_gives_each_service_what_it_needs_and_every_secret_to_whom_it_names() -> None:
    assert set(redis_acl.SERVICE_USER) == set(SERVICES)
    assert set(redis_acl.PROCESS_USER) == {*SERVICES, RENEWER}
    for service, needed in NEEDS.items():
        wrong = {key: (want, _user(service).access(key)) for key, want in needed.items() if _user(service).access(key) != want}
        assert not wrong, f"{service}: {wrong}"
    for key in TABLE:
        assert {w: _user(w).access(key) for w in USERS} == {w: _expected(key, w) for w in USERS}, key
    # named patterns for the upgrader: no pattern reaches every key of the deployment or of a cluster
    assert not {"*", "bke:*", "bke:*:*"} & set(_user("upgrader").keys)


def _client(runtime: EmbeddedRuntime, who: str) -> aioredis.Redis:
    assert runtime.info is not None
    if who == ADMIN:
        return aioredis.from_url(runtime.info.redis_url)
    return aioredis.from_url(redis_acl.service_url(runtime.workdir, runtime.info.redis_url, who))


async def _probe(r: aioredis.Redis, admin: aioredis.Redis, key: str) -> str:
    """What the server lets `r` do with `key`: "rw", "r" or ""; the key holds "v" after."""
    await admin.set(key, "v")
    try:
        await r.get(key)
    except NoPermissionError:
        readable = False
    else:
        readable = True
    try:
        await r.set(key, "w")
        await r.delete(key)
    except NoPermissionError:
        writable = False
    else:
        writable = True
        assert readable, key
    assert await admin.get(key) == (None if writable else "v")
    await admin.set(key, "v")
    return "rw" if writable else "r" if readable else ""


async def test_no_password_no_entry_and_no_password_in_a_printed_url(runtime: EmbeddedRuntime) -> None:
    assert runtime.info is not None
    port = runtime.info.redis_url.rsplit(":", 1)[1].split("/")[0]
    anon = aioredis.from_url(f"redis://127.0.0.1:{port}/0")
    try:
        with pytest.raises((AuthenticationError, ResponseError), match="(?i)auth"):
            await anon.get(plan_key(C))
    finally:
        await anon.aclose()
    url = redis_acl.service_url(runtime.workdir, runtime.info.redis_url, "certs")
    password = url.split(":")[2].split("@")[0]
    assert len(password) >= 32 and password not in redact_url(url) and "***" in redact_url(url)
    assert password not in (runtime.workdir / "redis-users.acl").read_text()  # hashes only


@pytest.mark.parametrize("who", USERS)
async def test_each_user_reads_and_writes_every_secret_exactly_as_the_table_says(
        runtime: EmbeddedRuntime, redis_client: aioredis.Redis, who: str) -> None:
    r = _client(runtime, who)
    try:
        got = {key: await _probe(r, redis_client, key) for key in TABLE}
        assert got == {key: _expected(key, who) for key in TABLE}
        for secret in SECRETS:
            if _expected(secret, who):
                continue
            with pytest.raises(NoPermissionError):  # a script gets no more than its caller
                await r.eval("return redis.call('GET', KEYS[1])", 1, secret)
            with pytest.raises(NoPermissionError):
                await r.eval_ro("return redis.call('GET', KEYS[1])", 1, secret)
            # nor by naming the key only inside the script (Redis answers with a script error)
            with pytest.raises(ResponseError, match="can't access|No permissions"):
                await r.eval(f"return redis.call('GET', '{secret}')", 0)
    finally:
        await r.aclose()


@pytest.mark.parametrize("service", [*SERVICES, RENEWER])
async def test_service_user_does_its_job_and_nothing_dangerous(runtime: EmbeddedRuntime, service: str,
                                                             redis_client: aioredis.Redis) -> None:
    r = _client(runtime, service)
    try:
        got = {key: await _probe(r, redis_client, key) for key in NEEDS[service]}
        assert got == NEEDS[service]
        own = next(key for key, how in NEEDS[service].items() if how == "rw")
        read_only = next(key for key, how in NEEDS[service].items() if how == "r")
        async with r.pipeline(transaction=True) as pipe:  # MULTI/EXEC, WATCH (a read-only key may be watched)
            await pipe.watch(read_only)
            pipe.multi()
            pipe.set(own, "e1")
            await pipe.execute()
        assert await r.eval("return redis.call('GET', KEYS[1])", 1, own) == b"e1"
        # EVAL asks for write access to every key it is given (Redis 7): a read-only key only with EVAL_RO
        with pytest.raises(NoPermissionError):
            await r.eval("return redis.call('GET', KEYS[1])", 1, read_only)
        assert await r.eval_ro("return redis.call('GET', KEYS[1])", 1, read_only) == b"v"
        for command in DANGEROUS:
            if command[0] != "DEBUG":  # Valkey refuses DEBUG to everyone first (enable-debug-command)
                with pytest.raises(NoPermissionError):
                    await r.execute_command(*command)
            # what the ACL alone says (ACL DRYRUN, asked as the admin)
            verdict = await redis_client.execute_command("ACL", "DRYRUN", redis_acl.PROCESS_USER[service], *command)
            assert "no permissions" in verdict, (command, verdict)
    finally:
        await r.aclose()


async def test_no_service_deletes_the_epoch_and_only_the_plans_writers_rewrite_a_plan(
        runtime: EmbeddedRuntime, redis_client: aioredis.Redis) -> None:
    epoch = await read_epoch(redis_client)
    assert epoch
    plan = SimpleNamespace(cluster=C)  # the stores read only the plan's cluster name
    clients = {who: _client(runtime, who) for who in (*SERVICES, ADMIN)}
    try:
        # the planner's key is made by the admin side; a service user may not make one
        await redis_client.delete(record_signing_key("plan"))
        with pytest.raises(RecordKeyError, match="run `bke state init`"):
            await RedisPlanStore(clients["planner"]).save(plan, '{"v": 1}', "d1", "r1", "t0")  # type: ignore[arg-type]
        await RedisPlanStore(clients[ADMIN]).keys.signer("plan")  # `bke state init`
        # the planner stores the plan through its script (plan, meta, request, index at once)
        assert await RedisPlanStore(clients["planner"]).save(plan, '{"v": 1}', "d1", "r1", "t0")  # type: ignore[arg-type]
        for service in SERVICES:
            r = clients[service]
            with pytest.raises(NoPermissionError):
                await r.delete(epoch_key())
            with pytest.raises(NoPermissionError):
                await r.set(epoch_key(), "another")
            if service != "upgrader":  # the one service that does not watch the epoch (nor read it)
                assert await read_epoch(r) == epoch
        for service in ("certs", "renderer", "dispatcher"):  # readers of the plan, not its writers
            r = clients[service]
            with pytest.raises(NoPermissionError):
                await r.set(plan_key(C), '{"v": "rewritten"}')
            with pytest.raises(NoPermissionError):
                await r.delete(plan_key(C), plan_meta_key(C))
            with pytest.raises(NoPermissionError):  # nor through the upgrader's own script
                await RedisPlanStore(r).upgrade(plan, '{"v": "rewritten"}', "dX", "d1", "r2", "t1")  # type: ignore[arg-type]
            with pytest.raises(ResponseError, match="can't access|No permissions"):
                await r.eval(f"return redis.call('SET', '{plan_key(C)}', 'x')", 0)
            assert await r.get(plan_key(C)) == b'{"v": 1}'  # still read
        assert await redis_client.get(plan_key(C)) == '{"v": 1}' and await read_epoch(redis_client) == epoch

        # positive controls: the upgrader replaces the plan it started from, the admin deletes the epoch
        assert await RedisPlanStore(clients["upgrader"]).upgrade(plan, '{"v": 2}', "d2", "d1", "r2", "t1")  # type: ignore[arg-type]
        assert await redis_client.get(plan_key(C)) == '{"v": 2}'
        assert await clients[ADMIN].delete(epoch_key()) == 1
        assert await ensure_epoch(clients[ADMIN], "e-again") == "e-again"  # `bke state init`
    finally:
        for r in clients.values():
            await r.aclose()


async def test_the_upgrader_records_an_answer_under_its_own_user_and_reads_no_agent_record(
        runtime: EmbeddedRuntime, redis_client: aioredis.Redis) -> None:
    """The accepted agents and the heartbeats are the dispatcher's record: the upgrader records
    the answers the dispatcher believed without them (bke_upgrader.results), and may neither read
    nor forge them."""
    r = _client(runtime, "upgrader")
    try:
        store = UpgradeStore(r)
        cid = f"{C}/upgrade@r1@workers/n1/0"
        result = CommandResult.model_validate({"commandId": cid, "cluster": C, "node": "n1", "agentId": "a",
                                               "status": "Succeeded", "steps": [], "startedAt": "t0", "finishedAt": "t1"})
        assert await store.record_if_current(result, "", "") == ""
        assert await redis_client.hexists(upgrade_results_key(C), cid)
        for key in (accepted_agents_key(C), heartbeat_key(C), heartbeat_runtime_key(C)):
            with pytest.raises(NoPermissionError):
                await r.hget(key, "n1")
            with pytest.raises(NoPermissionError):
                await r.hset(key, "n1", "forged")
    finally:
        await r.aclose()


def test_deployment_files_keep_their_passwords_and_hold_no_password_in_the_acl_file(tmp_path) -> None:
    first = redis_acl.write_deployment_files(tmp_path)
    env = (tmp_path / "dispatcher.env").read_text()
    assert env.startswith("BKE_REDIS_URL=redis://bke-dispatcher:") and "@redis:6379/0" in env
    assert all(p.stat().st_mode & 0o077 == 0 for p in first if p.suffix == ".env")
    redis_acl.write_deployment_files(tmp_path)
    assert (tmp_path / "dispatcher.env").read_text() == env  # made once
    password = env.split(":")[2].split("@")[0]
    assert password not in (tmp_path / "users.acl").read_text()
    assert "%R~bke:epoch" in (tmp_path / "users.acl").read_text()  # read-only patterns: Redis 7.0+
