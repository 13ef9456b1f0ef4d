"""Redis ACL users (bke.runtime.redis_acl) on the runtime the tests share: nobody gets in without
a password, no service user may run FLUSHALL/FLUSHDB/KEYS/CONFIG/DEBUG, none reads another
service's secrets (directly or from a Lua script), and each reaches every key family it needs.
That every service does its whole job under its user is shown by every lab test (the lab gives
each service its own user): tests/faults/test_state_loss.py and tests/e2e."""
from __future__ import annotations

from fnmatch import fnmatchcase

import pytest
import redis.asyncio as aioredis
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError

from bke.runtime import EmbeddedRuntime, redis_acl
from bke.state import keys as k
from bke.state.client import redact_url

pytestmark = pytest.mark.integration
C = "seed"
PKI_KEYS = k.pki_key(C, "keys")  # the CA keys (encrypted at rest, and still nobody else's)
VRRP = k.vrrp_password_key(C)
# what each service reads or writes (from the key table's owners and the services' code)
NEEDS = {
    "planner": [k.clusters_index(), k.recent_plans_key(), k.request_key("r1"), k.plan_key(C), k.plan_meta_key(C), k.plan_replaceable_key(C)],
    "certs": [k.clusters_index(), k.pki_index(), k.plan_key(C), k.plan_meta_key(C), PKI_KEYS, k.pki_key(C, "certs"),
              k.certs_agents_key(C), k.certs_ops_key(C), k.certs_renewal_key(C, "r1"), k.node_files_key(C, "certs"),
              k.node_files_digest_key(C, "certs"), k.operation_key(C), k.api_credentials_key(C)],
    "renderer": [k.recent_renders_key(), k.plan_key(C), k.addon_manifests_key(C), k.render_meta_key(C), VRRP, k.node_files_key(C, "render"),
                 k.node_files_digest_key(C, "render")],
    "dispatcher": [k.plan_key(C), k.installs_index(), k.rotations_index(), k.install_key(C), k.inputs_key(C),
                   k.sealed_key(C), k.phase_key(C, "etcd"), k.command_key(C, "etcd"), k.node_status_key(C),
                   k.lease_key(C, "etcd"), k.agents_key(C), k.heartbeat_key(C), k.heartbeat_runtime_key(C), k.addons_key(C),
                   k.addon_manifests_key(C), k.health_key(C), k.health_meta_key(C), k.health_pods_key(C),
                   k.rotation_key(C), k.rotation_results_key(C), k.node_files_key(C, "render"),
                   k.node_files_key(C, "certs"), k.node_files_digest_key(C, "certs"), k.paused_key(C, "dispatcher"),
                   k.joins_index(), k.join_key(C), k.join_results_key(C), k.removals_index(), k.removal_key(C),
                   k.removal_results_key(C), k.removal_api_key(C), k.operation_key(C), k.reset_key(C),
                   k.api_credentials_key(C)],
}
SECRETS = {PKI_KEYS: "certs", VRRP: "renderer"}


def _user(service: str) -> redis_acl.AclUser:
    return next(u for u in redis_acl.USERS if u.name == redis_acl.SERVICE_USER[service])


def test_table_gives_each_service_what_it_needs_and_no_other_service_a_secret() -> None:
    for service, needed in NEEDS.items():
        patterns = _user(service).keys
        assert k.epoch_key() in patterns
        missing = [key for key in needed if not any(fnmatchcase(key, p) for p in patterns)]
        assert not missing, f"{service} lacks {missing}"
    for secret, owner in SECRETS.items():
        readers = {s for s in NEEDS if any(fnmatchcase(secret, p) for p in _user(s).keys)}
        assert readers == {owner}, f"{secret} readable by {readers}"


def _client(runtime: EmbeddedRuntime, service: str) -> aioredis.Redis:
    assert runtime.info is not None
    return aioredis.from_url(redis_acl.service_url(runtime.workdir, runtime.info.redis_url, service))


async def test_no_password_no_entry_and_no_password_in_a_printed_url(runtime: EmbeddedRuntime) -> None:
    assert runtime.info is not None
    port = runtime.info.redis_url.rsplit(":", 1)[1].split("/")[0]
    anon = aioredis.from_url(f"redis://127.0.0.1:{port}/0")
    try:
        with pytest.raises((AuthenticationError, ResponseError), match="(?i)auth"):
            await anon.get(k.plan_key(C))
    finally:
        await anon.aclose()
    url = redis_acl.service_url(runtime.workdir, runtime.info.redis_url, "certs")
    password = url.split(":")[2].split("@")[0]
    assert len(password) >= 32 and password not in redact_url(url) and "***" in redact_url(url)
    assert password not in (runtime.workdir / "redis-users.acl").read_text()  # hashes only


@pytest.mark.parametrize("service", sorted(NEEDS))
async def test_service_user_does_its_job_and_nothing_dangerous(runtime: EmbeddedRuntime, service: str,
                                                             redis_client: aioredis.Redis) -> None:
    r = _client(runtime, service)
    try:
        for key in NEEDS[service]:  # read and write each family it needs
            await r.set(key, b"x")
            assert await r.exists(key) == 1
            await r.delete(key)
        async with r.pipeline(transaction=True) as pipe:  # MULTI/EXEC, WATCH
            await pipe.watch(k.epoch_key())
            pipe.multi()
            pipe.set(k.epoch_key(), "e1", nx=True)
            await pipe.execute()
        assert await r.eval("return redis.call('GET', KEYS[1])", 1, k.epoch_key()) is not None
        for command in (("FLUSHALL",), ("FLUSHDB",), ("KEYS", "*"), ("CONFIG", "GET", "dir"), ("DEBUG", "SLEEP", "0"),
                        ("SHUTDOWN",), ("ACL", "LIST"), ("MONITOR",)):
            with pytest.raises(NoPermissionError):
                await r.execute_command(*command)
        for secret, owner in SECRETS.items():
            if owner == service:
                continue
            with pytest.raises(NoPermissionError):
                await r.get(secret)
            with pytest.raises(NoPermissionError):
                await r.hgetall(secret)
            with pytest.raises(NoPermissionError):  # a script gets no more than its caller
                await r.eval("return redis.call('HGETALL', KEYS[1])", 1, secret)
            # nor by naming the key only inside the script (Redis answers with a script error)
            with pytest.raises(ResponseError, match="can't access"):
                await r.eval(f"return redis.call('HGETALL', '{secret}')", 0)
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
