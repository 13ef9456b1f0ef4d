"""The lab's identity keeper and `bke identities`: creds per process, rotation and revocation
reach the running nats-server (no reload); the deployment's nats.conf is one the server accepts."""
from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import nats
import pytest
import redis
import yaml

from bke.adapters.auth.permissions import SERVICE_ROLES, identity_name, inbox_prefix
from bke.adapters.auth.jwt import decode_jwt
from tests.trust_helpers import SIGNER
from bke.adapters.bus.connect import BusAccess, connect_nats, connect_options
from bke.lab.forkserver import ENABLE_ENV
from bke.lab.identities import creds_path
from bke.lab.supervisor import LabSupervisor
from bke.adapters.runtime.binaries import nats_server_bin
from bke.adapters.runtime.processes import _CHILDREN
from bke.core.secrets.at_rest import create_key_file

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
BKE = str(Path(sys.executable).parent / "bke")


async def _connect(url: str, creds: Path, name: str) -> nats.aio.client.Client:
    opts = connect_options(BusAccess(url, creds, inbox_prefix(name)))
    opts.update(allow_reconnect=False, max_reconnect_attempts=0)
    return await nats.connect(**opts)


async def _closed(nc: nats.aio.client.Client, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not nc.is_closed and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # polling under a deadline
    return nc.is_closed


async def test_lab_keeps_rotates_and_revokes_identities(tmp_path: Path) -> None:
    sup = LabSupervisor(tmp_path / "lab")
    info = sup.ensure_runtime()
    try:
        keeper = sup.identities(info)
        assert keeper is not None
        path = keeper.ensure("agent", "c1", "m1")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert keeper.ensure("agent", "c1", "m1") == path  # idempotent: the same key
        name = identity_name("agent", "c1", "m1")
        first = keeper.registry.get(name)
        nc = await _connect(info.nats_url, path, name)

        keeper.rotate(name)  # the old key is revoked: its live connection is cut
        assert await _closed(nc)
        second = keeper.registry.get(name)
        assert first is not None and second is not None and second.public != first.public
        assert second.previous == first.public
        nc2 = await _connect(info.nats_url, path, name)  # the rewritten file works

        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        listed = subprocess.run([BKE, "identities", "list", "--workdir", str(sup.workdir), "-o", "json"],
                                capture_output=True, text=True, env=env, check=True)
        assert {r["name"]: r["revoked_at"] is None for r in json.loads(listed.stdout)} == {name: True}

        stolen = tmp_path / "stolen.creds"  # what someone who copied the node's file would hold
        stolen.write_bytes(creds_path(sup.workdir, name).read_bytes())
        done = subprocess.run([BKE, "identities", "revoke", name, "--workdir", str(sup.workdir)],
                              capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        assert await _closed(nc2)
        assert not creds_path(sup.workdir, name).exists()
        record = keeper.registry.get(name)
        assert record is not None and record.revoked_at is not None
        # the revocation survives a restart of the lab's NATS (preloaded from the authority file)
        keeper.close()
        sup.runtime.stop()
        sup.ensure_runtime()
        assert sup.runtime.nats_auth is not None
        account = decode_jwt(sup.runtime.nats_auth.authority.account_jwt(int(time.time())))
        assert {first.public, second.public} <= set(account["nats"]["revocations"])
        info = sup.runtime.info
        assert info is not None
        with pytest.raises(nats.errors.Error, match="(?i)authoriz|revoked"):
            await _connect(info.nats_url, stolen, name)  # still refused after the restart
    finally:
        sup.down()


def _own_db(redis_url: str, db: int) -> str:
    """A database of its own: the registry's authority is one per Redis database and key."""
    return redis_url.rsplit("/", 1)[0] + f"/{db}"


def test_deployment_nats_conf_is_accepted_by_nats_server(tmp_path: Path, redis_url: str) -> None:
    redis_url = _own_db(redis_url, 6)
    redis.Redis.from_url(redis_url).flushdb()
    key = tmp_path / "secret.key"
    create_key_file(key)
    out = tmp_path / "nats"
    env = {**os.environ, "BKE_SECRET_KEY_FILE": str(key)}
    done = subprocess.run([BKE, "identities", "init", "--redis", redis_url, "--out", str(out)],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert f"system user {out / 'sys.creds'} (made)" in done.stdout
    for role in (*SERVICE_ROLES, "operator", "dashboard"):
        assert stat.S_IMODE((out / "creds" / f"{role}.creds").stat().st_mode) == 0o600
    # a second run keeps the system user: no unrevoked copy is left behind by a re-run
    sys_creds = (out / "sys.creds").read_bytes()
    again = subprocess.run([BKE, "identities", "init", "--redis", redis_url, "--out", str(out)],
                           capture_output=True, text=True, env=env)
    assert again.returncode == 0 and "(kept)" in again.stdout, again.stderr
    assert (out / "sys.creds").read_bytes() == sys_creds
    conf = (ROOT / "deploy/nats/nats.conf").read_text().replace('"/data"', f'"{tmp_path}/data"')
    (out / "nats.conf").write_text(conf)
    (out / "auth.conf").write_text((out / "auth.conf").read_text().replace("/data/jwt", f"{tmp_path}/data/jwt"))
    (tmp_path / "data" / "jwt").mkdir(parents=True)
    check = subprocess.run([nats_server_bin(), "-t", "-c", str(out / "nats.conf")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr + check.stdout
    # docker-compose: every service gets its own creds file and inbox prefix
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    for svc in SERVICE_ROLES:
        spec = compose["services"][svc]
        assert spec["environment"]["BKE_NATS_INBOX_PREFIX"] == inbox_prefix(svc)
        assert compose["secrets"][f"{svc}-creds"]["file"] == f"./deploy/nats/creds/{svc}.creds"


async def test_a_tls_lab_gives_every_process_the_ca_and_a_later_cli_keeps_it(tmp_path: Path) -> None:
    sup = LabSupervisor(tmp_path / "lab", tls=True)
    info = sup.ensure_runtime()
    try:
        assert info.nats_url.startswith("tls://") and info.nats_tls_ca
        access = sup.operator_access(info)
        assert access.tls_ca == Path(info.nats_tls_ca)
        opts = connect_options(access)
        opts.update(allow_reconnect=False, max_reconnect_attempts=0)
        nc = await nats.connect(**opts)
        assert nc.is_connected
        await nc.close()
        later = LabSupervisor(tmp_path / "lab")  # a later command does not know the lab used TLS
        assert later.runtime.ensure_started().nats_tls_ca == info.nats_tls_ca
    finally:
        sup.down()


def test_deployment_registry_provision_list_revoke_cluster(tmp_path: Path, redis_url: str) -> None:
    redis_url = _own_db(redis_url, 7)
    redis.Redis.from_url(redis_url).flushdb()
    key = tmp_path / "secret.key"
    create_key_file(key)
    env = {**os.environ, "BKE_SECRET_KEY_FILE": str(key)}

    def bke(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([BKE, "identities", *args, "--redis", redis_url], capture_output=True, text=True, env=env)

    for node in ("w1", "w2"):
        out = tmp_path / f"{node}.creds"
        done = bke("provision", "agent", "--cluster", "dep", "--node", node, "--out", str(out))
        assert done.returncode == 0, done.stderr
        assert stat.S_IMODE(out.stat().st_mode) == 0o600 and "BEGIN USER NKEY SEED" in out.read_text()
    bad = bke("provision", "agent", "--cluster", "dep", "--out", str(tmp_path / "x.creds"))
    assert bad.returncode == 2 and "--node" in bad.stderr
    gone = bke("revoke", "--cluster", "dep")
    assert gone.returncode == 0 and "not pushed yet" in gone.stdout
    rows = json.loads(bke("list", "--cluster", "dep", "-o", "json").stdout)
    assert {r["node"] for r in rows} == {"w1", "w2"} and all(r["revoked_at"] for r in rows)
    unknown = bke("revoke", "agent.dep.nope")
    assert unknown.returncode == 2 and "never issued" in unknown.stderr
    create_key_file(tmp_path / "other.key")
    env["BKE_SECRET_KEY_FILE"] = str(tmp_path / "other.key")
    wrong = bke("list")
    assert wrong.returncode == 2 and "cannot open the stored NATS authority" in wrong.stderr
    assert "Traceback" not in wrong.stderr



async def test_an_agent_whose_identity_is_revoked_exits_to_be_restarted(tmp_path: Path) -> None:
    """nats-py closes for good on "User Authentication Revoked" (it reconnects only after
    outages): a silent agent would be worse than none, so it exits 1 and systemd restarts it
    with the creds file the node then holds."""
    sup = LabSupervisor(tmp_path / "lab")
    info = sup.ensure_runtime()
    proc = None
    try:
        keeper = sup.identities(info)
        assert keeper is not None
        # the streams: declared by the lab's start (its deploy step)
        dispatcher_env = keeper.env("dispatcher")
        dispatcher = await connect_nats(BusAccess(info.nats_url, Path(dispatcher_env["BKE_NATS_CREDS"]),
                                                  dispatcher_env["BKE_NATS_INBOX_PREFIX"]))
        beats = await dispatcher.subscribe("bke.v1.heartbeat.>")
        root = tmp_path / "hosts" / "m1"
        root.mkdir(parents=True)
        env = {**os.environ, "BKE_NATS_URL": info.nats_url, "BKE_AGENT_CLUSTER": "c1", "BKE_AGENT_NODE": "m1",
               "BKE_AGENT_BACKEND": "lab", "BKE_AGENT_ROOT": str(root), "BKE_AGENT_IP": "127.0.0.1",
               "BKE_AGENT_HEARTBEAT_S": "0.2", **keeper.env("agent", "c1", "m1"),
               # an agent starts only with the dispatcher's public key provisioned
               "BKE_AGENT_COMMAND_KEY": SIGNER.verify_key.public_line}
        log = open(tmp_path / "agent.log", "wb")
        proc = subprocess.Popen([str(Path(sys.executable).parent / "bke-agent"), "run"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        await beats.next_msg(timeout=30)  # started: consumer bound, registered, beating
        await asyncio.to_thread(keeper.revoke, identity_name("agent", "c1", "m1"))
        code = await asyncio.to_thread(proc.wait, 30)
        assert code == 1
        assert "closed this agent's connection for good" in (tmp_path / "agent.log").read_text()
        await dispatcher.close()
        keeper.close()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        sup.down()


async def test_a_service_whose_identity_is_revoked_exits_to_be_restarted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same rule for a service: cut off for good, it stops and exits 1 (bke.adapters.bus.service)
    instead of staying alive and silent; before, it went on running, not ready for ever. A fresh
    interpreter (`BKE_LAB_FORKSERVER=0`): a child of this process, whose exit status it reaps."""
    monkeypatch.setenv(ENABLE_ENV, "0")
    sup = LabSupervisor(tmp_path / "lab")
    info = sup.ensure_runtime()
    try:
        pid = sup.ensure_services(info, only=("planner",))["planner"]
        keeper = sup.identities(info)
        assert keeper is not None
        operator = await connect_nats(sup.operator_access(info))
        try:
            async def answers() -> bool:
                try:
                    await operator.request("bke.v1.health.planner", b"", timeout=1.0)
                except Exception:  # noqa: BLE001 - not up yet
                    return False
                return True

            deadline = asyncio.get_running_loop().time() + 30
            while not await answers():  # started: it answers its health request
                assert asyncio.get_running_loop().time() < deadline, "the planner never answered"
                await asyncio.sleep(0.1)  # polling under a deadline
        finally:
            await operator.close()
        child = _CHILDREN[pid]  # the Popen the supervisor made: its exit status
        await asyncio.to_thread(keeper.revoke, identity_name("planner"))
        keeper.close()
        assert await asyncio.to_thread(child.wait, 30) == 1
        log = (tmp_path / "lab" / "logs" / "planner.log").read_text()
        assert "closed this service's connection for good" in log
    finally:
        sup.down()
