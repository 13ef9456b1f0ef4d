"""The runtime's system user (`auth/sys.creds`, bke.adapters.auth.system_user) against the real nats-server:
a restart keeps it byte for byte and refuses the system users minted before it; a damaged one is
replaced and the old key is refused at once by the running server (its live connection cut) and
after a restart of the server; a foreign one cannot connect at all. Each refusal has its positive
control: the current file connects and pushes."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import pytest

from bke.adapters.auth.authority import creds_text, new_authority, write_creds
from bke.adapters.auth.push import push_system_account
from bke.adapters.auth.system_user import creds_parts
from bke.adapters.auth.jwt import decode_jwt, new_keypair
from bke.adapters.runtime import EmbeddedRuntime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _connect(url: str, creds: Path) -> nats.aio.client.Client:
    return await nats.connect(url, user_credentials=str(creds), allow_reconnect=False, max_reconnect_attempts=0,
                              connect_timeout=3)


async def _refused(url: str, creds: Path) -> bool:
    try:
        nc = await _connect(url, creds)
    except nats.errors.Error as exc:
        return "authorization violation" in str(exc).lower()
    await nc.close()
    return False


async def _closed(nc: nats.aio.client.Client, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not nc.is_closed and time.monotonic() < deadline:
        await asyncio.sleep(0.05)  # polling under a deadline
    return nc.is_closed


async def test_sys_creds_is_kept_and_a_replaced_one_is_refused(tmp_path: Path) -> None:
    rt = EmbeddedRuntime(tmp_path / "rt", auth=True)
    info = await asyncio.to_thread(rt.ensure_started)
    try:
        auth = rt.nats_auth
        assert auth is not None and auth.system_user is not None and auth.system_user.status == "made"
        sys_creds = auth.system_creds
        first = sys_creds.read_bytes()
        copy = tmp_path / "copy.creds"  # what someone who read the file before holds
        copy.write_bytes(first)
        # a system user minted before it (what an older lab did at every start) is refused
        earlier = write_creds(tmp_path / "earlier.creds", auth.authority.system_user(iat=int(time.time()) - 60).creds)
        assert await _refused(info.nats_url, earlier)

        # a second start (the server is reused) keeps the file byte for byte
        again = EmbeddedRuntime(rt.workdir, auth=True)
        assert await asyncio.to_thread(again.ensure_started) == info
        assert again.nats_auth is not None and again.nats_auth.system_user is not None
        assert again.nats_auth.system_user.status == "kept" and sys_creds.read_bytes() == first
        live = await _connect(info.nats_url, copy)  # positive control: the kept user connects

        # a damaged file (our JWT, another seed): replaced, and the old key refused at once
        token, _ = creds_parts(first.decode())
        write_creds(sys_creds, creds_text(token or "", new_keypair("user").seed))
        third = EmbeddedRuntime(rt.workdir, auth=True)
        assert await asyncio.to_thread(third.ensure_started) == info  # the same server, not restarted
        assert third.nats_auth is not None and third.nats_auth.system_user is not None
        replaced = third.nats_auth.system_user
        assert (replaced.status, replaced.found) == ("replaced", "mismatched")
        assert replaced.revoked == decode_jwt(token or "")["sub"] == auth.system_user.public
        assert await _closed(live)  # the running server cut the old user's connection
        assert await _refused(info.nats_url, copy)
        # positive control: the new file connects and may push the system account
        await push_system_account(info.nats_url, sys_creds, third.nats_auth.authority, iat=int(time.time()))

        # a foreign sys.creds (another authority's) cannot connect, and is replaced without a revocation
        foreign = write_creds(tmp_path / "foreign.creds", new_authority().system_user(iat=int(time.time())).creds)
        assert await _refused(info.nats_url, foreign)

        # after a restart of the server, the revocations are preloaded: still refused
        await asyncio.to_thread(third.stop)
        fourth = EmbeddedRuntime(rt.workdir, auth=True)
        info = await asyncio.to_thread(fourth.ensure_started)
        assert fourth.nats_auth is not None and fourth.nats_auth.system_user is not None
        assert fourth.nats_auth.system_user.status == "kept"
        assert await _refused(info.nats_url, copy) and await _refused(info.nats_url, earlier)
        nc = await _connect(info.nats_url, sys_creds)  # positive control
        await nc.close()
        rt = fourth
    finally:
        await asyncio.to_thread(rt.stop)
