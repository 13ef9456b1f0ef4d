"""An agent renews its own identity against a real nats-server in operator mode and a real Redis
(the registry and authority the server trusts): near expiry it gets a JWT for the same key with a
later expiry, swaps its creds file and goes on working past the old JWT's expiry on the
subscription it had before; a revoked agent is refused and keeps its file; another node's agent
can neither ask on that node's subject nor renew it from its own."""
from __future__ import annotations

import asyncio
import base64
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import redis
from nats.aio.client import Client as NatsClient

from bke.adapters.auth import write_creds
from bke.adapters.auth import serve_renewals
from bke.adapters.auth.agent_renewal import AgentRenewalResponder
from bke.adapters.auth.creds import creds_parts
from bke.adapters.auth.jwt import decode_jwt, keypair_from_seed
from bke.adapters.auth.permissions import IDENTITY_TTL_S, identity_name, inbox_prefix
from bke.adapters.auth.registry import IdentityRegistry
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.runtime import EmbeddedRuntime
from bke.adapters.runtime.processes import free_port, pid_alive
from bke.contracts.agent import agent_subject
from bke.contracts.identity import AgentIdentityRenewed, RenewAgentIdentity, renew_identity_subject
from bke.core.secrets.at_rest import create_key_file, load_secret_box
from bke.lab.forkserver import ENABLE_ENV
from bke.lab.identities import LabIdentities
from bke.lab.key_files import lab_key_file
from bke.lab.supervisor import LabSupervisor
from bke_agent.renewal import IdentityRenewal
from tests.bus_identity_helpers import CLUSTER, _connect

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
TTL = IDENTITY_TTL_S["agent"]


class Setup:
    def __init__(self, rt: EmbeddedRuntime, tmp: Path) -> None:
        assert rt.info is not None and rt.nats_auth is not None
        self.rt, self.tmp, self.now = rt, tmp, int(time.time())
        self.clock = [self.now]
        self.registry = IdentityRegistry(redis.Redis.from_url(rt.info.redis_url), load_secret_box(rt.nats_auth.key_file),
                                         lambda: self.clock[0])
        self.registry.save_authority(rt.nats_auth.authority)  # the one the server trusts

    def issue(self, role: str, node: str | None = None, *, expires_in: int | None = None) -> Path:
        """Creds of a new identity; `expires_in`: its JWT expires that many seconds from now."""
        self.clock[0] = self.now if expires_in is None else self.now + expires_in - IDENTITY_TTL_S[role]
        user = self.registry.issue(role, CLUSTER if node else None, node)
        self.clock[0] = self.now
        return write_creds(self.tmp / f"{user.name}.creds", user.creds)

    async def agent(self, node: str, creds: Path, reconnected: asyncio.Event | None = None) -> NatsClient:
        async def on_reconnect() -> None:
            if reconnected is not None:
                reconnected.set()

        assert self.rt.info is not None
        prefix = inbox_prefix(identity_name("agent", CLUSTER, node))
        return await connect_nats(BusAccess(self.rt.info.nats_url, creds, prefix), reconnected_cb=on_reconnect)


@pytest.fixture
async def setup(secure: EmbeddedRuntime, tmp_path: Path) -> AsyncIterator[Setup]:
    s = Setup(secure, tmp_path)
    assert secure.info is not None
    renewer = await connect_nats(BusAccess(secure.info.nats_url, s.issue("renewer"), inbox_prefix("renewer")))
    responder = AgentRenewalResponder(renewer, s.registry, lambda: int(time.time()))
    await responder.start()
    yield s
    await responder.stop()
    await renewer.close()


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)  # polling under a deadline


async def test_an_agent_near_expiry_renews_for_the_same_key_and_keeps_working(setup: Setup) -> None:
    creds = setup.issue("agent", "node-a", expires_in=8)  # due: a few seconds of its year left
    old_token, seed = creds_parts(creds.read_text())
    old = decode_jwt(old_token)
    kept_old = write_creds(setup.tmp / "old.creds", creds.read_text())
    reconnected = asyncio.Event()
    nc = await setup.agent("node-a", creds, reconnected)
    commands = await nc.subscribe(agent_subject(CLUSTER, "node-a", "command"))  # work it had before
    await nc.flush()
    try:
        assert await IdentityRenewal(nc, creds, CLUSTER, "node-a").renew_once() == "renewed"
        new_token, new_seed = creds_parts(creds.read_text())
        new = decode_jwt(new_token)
        assert new_seed == seed and new["sub"] == old["sub"]  # the same key: no seed was made or sent
        assert new["exp"] > old["exp"] + TTL // 2 and new["jti"] != old["jti"]
        assert creds.stat().st_mode & 0o777 == 0o600
        record = setup.registry.get(identity_name("agent", CLUSTER, "node-a"))
        assert record is not None and record.public == old["sub"] and record.expires_at == new["exp"]
        await asyncio.wait_for(reconnected.wait(), 15)

        async def old_jwt_refused() -> bool:  # the old JWT's expiry has passed on the server
            try:
                client = await _connect(setup.rt, kept_old, inbox_prefix(identity_name("agent", CLUSTER, "node-a")))
            except Exception:  # noqa: BLE001 - refused at connect: expired
                return True
            await client.nc.close()
            return False

        await _until(old_jwt_refused, "the old JWT never expired")
        assert nc.is_connected  # not cut at the old JWT's expiry: it runs on the new one
        dispatcher = await connect_nats(BusAccess(setup.rt.info.nats_url, setup.issue("dispatcher"),  # type: ignore[union-attr]
                                                  inbox_prefix("dispatcher")))
        await dispatcher.jetstream().publish(agent_subject(CLUSTER, "node-a", "command"), b"after-expiry")
        await dispatcher.close()
        assert (await commands.next_msg(timeout=10)).data == b"after-expiry"
    finally:
        await nc.close()


async def test_a_revoked_agent_is_refused_and_keeps_its_file(setup: Setup) -> None:
    creds = setup.issue("agent", "node-r", expires_in=3600)
    before = creds.read_bytes()
    nc = await setup.agent("node-r", creds)
    try:
        setup.registry.revoke(identity_name("agent", CLUSTER, "node-r"))  # not pushed yet: still connected
        outcome = await IdentityRenewal(nc, creds, CLUSTER, "node-r").renew_once()
        assert outcome.startswith("refused:") and "revoked" in outcome
        assert creds.read_bytes() == before
    finally:
        await nc.close()
    # positive control: the same request of a live node is answered (the test above shows it in full)
    live = setup.issue("agent", "node-l", expires_in=3600)
    nc = await setup.agent("node-l", live)
    try:
        assert await IdentityRenewal(nc, live, CLUSTER, "node-l").renew_once() == "renewed"
    finally:
        await nc.close()


async def test_another_agent_cannot_renew_a_node_not_its_own(setup: Setup) -> None:
    victim = setup.issue("agent", "node-v", expires_in=3600)
    before = victim.read_bytes()
    victim_key = decode_jwt(creds_parts(before.decode())[0])["sub"]
    intruder = setup.issue("agent", "node-i", expires_in=3600)
    client = await _connect(setup.rt, intruder, inbox_prefix(identity_name("agent", CLUSTER, "node-i")))
    try:
        # on the victim's subject: the server refuses the publish
        assert await client.pub_refused(renew_identity_subject(CLUSTER, "node-v"))
        # on its own subject, naming the victim: refused by the renewer (the body is not the subject's node)
        token, seed = creds_parts(intruder.read_text())
        key = keypair_from_seed(seed)
        for node, public in (("node-v", victim_key), ("node-i", victim_key)):
            unsigned = RenewAgentIdentity(cluster=CLUSTER, node=node, public_key=public,
                                          jti=str(decode_jwt(token)["jti"]), at=int(time.time()), signature="-")
            req = unsigned.model_copy(update={"signature": base64.b64encode(key.sign(unsigned.signed_bytes())).decode()})
            msg = await client.nc.request(renew_identity_subject(CLUSTER, "node-i"), req.to_bytes(), timeout=10)
            answer = AgentIdentityRenewed.model_validate_json(msg.data)
            assert not answer.ok and not answer.jwt, node
        assert victim.read_bytes() == before
        record = setup.registry.get(identity_name("agent", CLUSTER, "node-v"))
        assert record is not None and record.expires_at == setup.now + 3600  # not renewed
    finally:
        await client.nc.close()


async def test_bke_identities_serve_renewals_answers_an_agent(secure: EmbeddedRuntime, tmp_path: Path) -> None:
    """The command a deployment runs where the authority key is: it answers an agent that is due,
    and says how many it renewed when stopped (SIGINT, as Ctrl-C)."""
    s = Setup(secure, tmp_path)
    assert secure.info is not None and secure.nats_auth is not None
    renewer = s.issue("renewer")
    key = tmp_path / "authority.key"
    key.write_bytes(secure.nats_auth.key_file.read_bytes())
    env = {**os.environ, "BKE_KEY_FILE_AUTHORITY": str(key)}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "bke"), "identities", "serve-renewals", "--redis", secure.info.redis_url,
        "--nats", secure.info.nats_url, "--creds", str(renewer), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stdout is not None
        ready = await asyncio.wait_for(proc.stdout.readline(), 30)
        assert b"answering agents' renewal requests" in ready
        creds = s.issue("agent", "node-s", expires_in=3600)
        nc = await s.agent("node-s", creds)
        try:
            assert await IdentityRenewal(nc, creds, CLUSTER, "node-s").renew_once() == "renewed"
        finally:
            await nc.close()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert b"renewed 1, refused 0" in out, err.decode()[-2000:]


async def test_the_lab_runs_the_renewer_beside_the_services_and_stops_it_at_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lab's supervisor starts `bke identities serve-renewals` as the renewer (its creds, its
    own Redis user, the authority key alone), once; an agent of the lab near expiry renews
    through it; `bke lab down` stops it. A fresh interpreter (`BKE_LAB_FORKSERVER=0`): its
    /proc/<pid>/environ then shows what it was given (a forked one's shows the fork server's)."""
    monkeypatch.setenv(ENABLE_ENV, "0")
    sup = LabSupervisor(tmp_path / "lab")
    info = sup.ensure_runtime()
    try:
        pid = sup.ensure_renewer(info)
        assert pid is not None and sup.ensure_renewer(info) == pid  # idempotent: the running one kept
        log = tmp_path / "lab" / "logs" / "renewer.log"

        async def listening() -> bool:
            return log.is_file() and b"answering agents' renewal requests" in log.read_bytes()

        await _until(listening, f"the renewer never listened: {log}")
        clock = [int(time.time()) + 3600 - TTL]  # issued so that an hour of its year is left
        keeper = LabIdentities(sup.workdir, sup.runtime, info, clock=lambda: clock[0])
        try:
            creds = keeper.ensure("agent", CLUSTER, "node-l")
        finally:
            keeper.close()
        old = decode_jwt(creds_parts(creds.read_text())[0])
        nc = await connect_nats(BusAccess(info.nats_url, creds, inbox_prefix(identity_name("agent", CLUSTER, "node-l"))))
        try:
            assert await IdentityRenewal(nc, creds, CLUSTER, "node-l").renew_once() == "renewed"
        finally:
            await nc.close()
        new = decode_jwt(creds_parts(creds.read_text())[0])
        assert new["sub"] == old["sub"] and new["exp"] > old["exp"] + TTL // 2
        env = (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
        assert [e for e in env if e.startswith(b"BKE_KEY_FILE_")] == [b"BKE_KEY_FILE_AUTHORITY=" + str(
            lab_key_file(sup.workdir, "authority")).encode()]
        assert any(e.startswith(b"BKE_REDIS_URL=redis://bke-renewer:") for e in env)
    finally:
        sup.down()
    assert not pid_alive(pid) and sup.pids().get("renewer", {}) == {}


def test_the_renewer_process_refuses_a_wrong_setting_or_key_before_it_serves(secure: EmbeddedRuntime,
                                                                              tmp_path: Path) -> None:
    """Exit 2 (a container is not restarted into the same mistake) for a missing setting and for
    an at-rest key that does not open the stored authority; 1 for a Redis it cannot reach."""
    s = Setup(secure, tmp_path)
    assert secure.info is not None
    env = {"BKE_NATS_URL": secure.info.nats_url, "BKE_NATS_CREDS": str(s.issue("renewer")),
           "BKE_REDIS_URL": secure.info.redis_url, "BKE_KEY_FILE_AUTHORITY": str(tmp_path / "other.key")}
    create_key_file(tmp_path / "other.key")
    assert serve_renewals.run({k: v for k, v in env.items() if k != "BKE_NATS_CREDS"}) == serve_renewals.EXIT_INVALID
    assert serve_renewals.run(env) == serve_renewals.EXIT_INVALID  # the stored authority does not open
    assert secure.nats_auth is not None
    unreachable = {**env, "BKE_KEY_FILE_AUTHORITY": str(secure.nats_auth.key_file),
                   "BKE_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    assert serve_renewals.run(unreachable) == serve_renewals.EXIT_RETRY


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or not Path("/dev/shm").is_dir(),
                    reason="a mount namespace of its own needs root and unshare; the mount point is on /dev/shm, "
                           "another filesystem than the test's folder")
def test_a_creds_file_bind_mounted_on_its_own_is_found_before_a_renewal_would_fail(tmp_path: Path) -> None:
    """What compose does with a secret (a file bind-mounted read-only in /run/secrets), in a mount
    namespace of the test's own: the agent's check finds it, and replacing it does fail."""
    source, folder = tmp_path / "secret.creds", Path(tempfile.mkdtemp(dir="/dev/shm"))
    source.write_text("jwt and seed")
    (folder / "agent.creds").write_text("")
    probe = ("import sys; from pathlib import Path; from bke_agent.renewal import creds_unwritable;"
             "from bke.adapters.auth.authority import write_private; p = Path(sys.argv[1]); print(creds_unwritable(p));"
             "write_private(p, b'new')")
    try:
        done = subprocess.run(["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$1" "$2" && exec "$3" -c "$4" "$2"',
                               "-", str(source), str(folder / "agent.creds"), sys.executable, probe],
                              capture_output=True, text=True, timeout=60)
    finally:
        shutil.rmtree(folder)
    assert "mounted on its own" in done.stdout, done.stdout + done.stderr
    assert done.returncode != 0 and "Device or resource busy" in done.stderr  # what the check spares
    assert source.read_text() == "jwt and seed"
