"""The deploy step against a real nats-server: `bke streams check/ensure` and `python -m
bke.adapters.bus.declare` report and put back a changed stream, only as the `streams` identity; a command
that publishes before the streams exist says what to run."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nats.js.api import StreamConfig

from bke.adapters.auth import identity_name, inbox_prefix, role_permissions, write_creds
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.runtime import EmbeddedRuntime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
BKE = str(Path(sys.executable).parent / "bke")


def _creds(rt: EmbeddedRuntime, tmp: Path, role: str) -> Path:
    assert rt.nats_auth is not None
    user = rt.nats_auth.authority.user(identity_name(role), role_permissions(role), iat=int(time.time()))
    return write_creds(tmp / f"{role}.creds", user.creds)


def _run(argv: list[str], url: str, creds: Path | None, role: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKE_")}
    env["BKE_NATS_URL"] = url
    if creds is not None and role is not None:
        env.update(BKE_NATS_CREDS=str(creds), BKE_NATS_INBOX_PREFIX=inbox_prefix(role))
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


async def test_check_reports_a_changed_stream_and_ensure_puts_it_back(secure: EmbeddedRuntime, tmp_path: Path) -> None:
    assert secure.info is not None
    url = secure.info.nats_url
    deploy = _creds(secure, tmp_path, "streams")
    assert _run([BKE, "streams", "check", "--nats", url], url, deploy, "streams").returncode == 0
    nc = await connect_nats(BusAccess(url, deploy, inbox_prefix("streams")))
    try:
        js = nc.jetstream()
        cfg = (await js.stream_info("BKE_EVENTS")).config
        await js.update_stream(StreamConfig.from_response({**cfg.as_dict(), "sources": [{"name": "BKE_AGENT"}]}))
        checked = _run([BKE, "streams", "check", "--nats", url], url, deploy, "streams")
        assert checked.returncode == 1 and "BKE_EVENTS: has sources" in checked.stderr
        # the operator may not put it back: the deploy step's one-shot under its identity fails
        operator = _creds(secure, tmp_path, "operator")
        refused = _run([sys.executable, "-m", "bke.adapters.bus.declare"], url, operator, "operator")
        assert refused.returncode != 0 and (await js.stream_info("BKE_EVENTS")).config.sources
        done = _run([sys.executable, "-m", "bke.adapters.bus.declare"], url, deploy, "streams")
        assert done.returncode == 0, done.stderr
        assert not (await js.stream_info("BKE_EVENTS")).config.sources
        ensured = _run([BKE, "streams", "ensure", "--nats", url], url, deploy, "streams")
        assert ensured.returncode == 0 and "as declared" in ensured.stdout
    finally:
        await nc.close()


async def test_a_command_before_the_deploy_step_says_what_to_run(tmp_path: Path) -> None:
    rt = EmbeddedRuntime(tmp_path / "open", auth=False)
    info = rt.ensure_started()
    try:
        nc = await connect_nats(BusAccess(info.nats_url))
        await nc.jetstream().delete_stream("BKE_COMMANDS")  # an open server: anyone may (the lab's is not open)
        await nc.close()
        paused = _run([BKE, "pause", "c1", "--nats", info.nats_url], info.nats_url, None, None)
        assert paused.returncode == 1
        assert "stream BKE_COMMANDS: missing" in paused.stderr and "bke streams ensure" in paused.stderr
        assert _run([BKE, "streams", "ensure", "--nats", info.nats_url], info.nats_url, None, None).returncode == 0
        assert _run([BKE, "streams", "check", "--nats", info.nats_url], info.nats_url, None, None).returncode == 0
    finally:
        rt.stop()
