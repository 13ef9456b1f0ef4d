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
from nats.js.api import AckPolicy, ConsumerConfig, DiscardPolicy, RetentionPolicy, StreamConfig
from nats.js.errors import NotFoundError

import bke.adapters.bus.service as service_module
from bke.adapters.auth import identity_name, inbox_prefix, role_permissions, write_creds
from bke.adapters.auth.permissions import Permissions
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.bus.service import make_service
from bke.adapters.bus.streams import (AGENT_OUTPUT_INTEREST, AGENT_OUTPUT_STREAM, AGENT_STREAM, StreamsNotDeclared,
                                     interest_config)
from bke.adapters.runtime import EmbeddedRuntime
from bke.adapters.settings import ServiceSettings
from bke.contracts.agent import agent_subject

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


async def test_ensure_deletes_the_consumers_an_earlier_release_left_on_the_outputs_stream(
        secure: EmbeddedRuntime, tmp_path: Path) -> None:
    """The upgrader's result consumers of an earlier release (it reads no agent subject now): an
    interest stream would keep every output they match, unread, until it refused new ones."""
    assert secure.info is not None and secure.nats_auth is not None
    url = secure.info.nats_url
    everything = Permissions(pub_allow=(">",), sub_allow=(">",))  # as that release's upgrader made them
    old = write_creds(tmp_path / "old.creds", secure.nats_auth.authority.user("old", everything, iat=int(time.time())).creds)
    nc = await connect_nats(BusAccess(url, old))
    try:
        js = nc.jetstream()
        for durable, kind in (("upgrader-results", "result"), ("upgrader-answers", "upgrader-result")):
            await js.add_consumer(AGENT_OUTPUT_STREAM, interest_config(durable, f"bke.v1.agent.*.*.{kind}"))
        deploy = _creds(secure, tmp_path, "streams")
        done = _run([BKE, "streams", "ensure", "--nats", url], url, deploy, "streams")
        assert done.returncode == 0, done.stderr
        for durable in ("upgrader-results", "upgrader-answers"):
            with pytest.raises(NotFoundError):
                await js.consumer_info(AGENT_OUTPUT_STREAM, durable)
        for durable, _ in AGENT_OUTPUT_INTEREST:  # the declared ones stay
            assert (await js.consumer_info(AGENT_OUTPUT_STREAM, durable)).name == durable
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


async def test_an_interest_stream_keeps_nothing_that_no_consumer_is_for(tmp_path: Path) -> None:
    """What the outputs' stream relies on and what the deploy step's consumers are for: nats-server
    acknowledges a message that no consumer's filter matches and does not store it; once a
    consumer matches, it is stored, and gone when that consumer acknowledges it."""
    rt = EmbeddedRuntime(tmp_path / "open", auth=False)
    info = rt.ensure_started()
    nc = await connect_nats(BusAccess(info.nats_url))
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="SCRATCH", subjects=["scratch.>"], retention=RetentionPolicy.INTEREST))
        await js.add_consumer("SCRATCH", ConsumerConfig(durable_name="other", filter_subject="scratch.other",
                                                        ack_policy=AckPolicy.EXPLICIT))
        assert (await js.publish("scratch.lost", b"x")).seq == 1  # acknowledged ...
        assert (await js.stream_info("SCRATCH")).state.messages == 0  # ... and not kept
        await js.publish("scratch.other", b"y")
        assert (await js.stream_info("SCRATCH")).state.messages == 1
        sub = await js.pull_subscribe("scratch.other", durable="other", stream="SCRATCH")
        (msg,) = await sub.fetch(1, timeout=5)
        await msg.ack_sync()
        assert (await js.stream_info("SCRATCH")).state.messages == 0
    finally:
        await nc.close()
        rt.stop()


async def test_a_deployment_of_one_agent_stream_is_refused_then_split_by_the_deploy_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A deployment of the previous release: every agent subject in BKE_AGENT, its services'
    output consumers on it, no BKE_AGENT_OUT. A service refuses to start, naming both and the
    command to run; `bke streams ensure` narrows BKE_AGENT to the commands (the command waiting
    there stays), makes BKE_AGENT_OUT with its consumers, and a registration published right
    after is kept for the certs service."""
    rt = EmbeddedRuntime(tmp_path / "open", auth=False)
    info = rt.ensure_started()
    nc = await connect_nats(BusAccess(info.nats_url))
    try:
        js = nc.jetstream()
        await js.delete_stream(AGENT_OUTPUT_STREAM)  # an open server: anyone may (the lab's is not open)
        old = (await js.stream_info(AGENT_STREAM)).config
        await js.update_stream(StreamConfig.from_response({**old.as_dict(), "subjects": ["bke.v1.agent.>"]}))
        await js.add_consumer(AGENT_STREAM, ConsumerConfig(durable_name="dispatcher-results", filter_subject="bke.v1.agent.*.*.result",
                                                           ack_policy=AckPolicy.EXPLICIT))
        await js.publish(agent_subject("c1", "node-b", "command"), b"for-b")
        checked = _run([BKE, "streams", "check", "--nats", info.nats_url], info.nats_url, None, None)
        assert checked.returncode == 1 and f"stream {AGENT_OUTPUT_STREAM}: missing" in checked.stderr
        assert "stream BKE_AGENT: subjects ['bke.v1.agent.>']" in checked.stderr
        monkeypatch.setattr(service_module, "STREAMS_WAIT_S", 0.5)
        svc = make_service("certs", ServiceSettings(nats_url=info.nats_url, redis_url=info.redis_url))
        with pytest.raises(StreamsNotDeclared, match=f"{AGENT_OUTPUT_STREAM}: missing.*bke streams ensure"):
            await svc.start()
        await svc.stop_http()

        ensured = _run([BKE, "streams", "ensure", "--nats", info.nats_url], info.nats_url, None, None)
        assert ensured.returncode == 0, ensured.stderr
        assert (await js.stream_info(AGENT_STREAM)).config.subjects == ["bke.v1.agent.*.*.command"]
        command = agent_subject("c1", "node-b", "command")
        assert (await js.stream_info(AGENT_STREAM, subjects_filter=command)).state.subjects == {command: 1}
        out = await js.stream_info(AGENT_OUTPUT_STREAM)
        assert out.config.retention == RetentionPolicy.INTEREST and out.config.discard == DiscardPolicy.NEW
        assert sorted(c.name for c in await js.consumers_info(AGENT_OUTPUT_STREAM)) == sorted(d for d, _ in AGENT_OUTPUT_INTEREST)
        registered = agent_subject("c1", "node-b", "registered")
        await js.publish(registered, b"{}")
        assert (await js.stream_info(AGENT_OUTPUT_STREAM, subjects_filter=registered)).state.subjects == {registered: 1}
        assert _run([BKE, "streams", "check", "--nats", info.nats_url], info.nats_url, None, None).returncode == 0
    finally:
        await nc.close()
        rt.stop()
