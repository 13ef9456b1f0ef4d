"""The embedded NATS + Redis runtime against the real binaries: start, reuse, persist, stop by PID."""
from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import nats
import pytest
import redis.asyncio as aioredis
from nats.aio.client import Client as NatsClient

from bke.adapters.runtime import EmbeddedRuntime, MissingBinaryError, RuntimeInfo, pid_alive, poll_until
from bke.adapters.runtime.binaries import _locate

pytestmark = pytest.mark.integration


def test_runtime_json_lists_live_servers(runtime: EmbeddedRuntime) -> None:
    info = runtime.info
    assert info is not None
    doc = json.loads((runtime.workdir / "runtime.json").read_text())
    assert doc["natsUrl"] == info.nats_url and doc["redisUrl"] == info.redis_url
    assert doc["pids"] == {"nats": info.nats_pid, "redis": info.redis_pid}
    assert RuntimeInfo.from_json(doc) == info
    assert pid_alive(info.nats_pid) and pid_alive(info.redis_pid)
    assert "max_mem: 256MB" in (runtime.workdir / "nats.conf").read_text()


def test_server_logs_are_the_owners_alone(runtime: EmbeddedRuntime) -> None:
    logs = runtime.workdir / "logs"
    assert logs.stat().st_mode & 0o777 == 0o700
    files = sorted(logs.glob("*.log"))
    assert [f.name for f in files] == ["nats-server.log", "redis-server.log"]
    assert all(f.stat().st_mode & 0o777 == 0o600 for f in files)


def test_second_ensure_started_reuses_the_same_processes(runtime: EmbeddedRuntime) -> None:
    assert EmbeddedRuntime(runtime.workdir, auth=False).ensure_started() == runtime.info
    assert runtime.start() == runtime.info  # `start` is the alias


async def test_jetstream_publish_returns_puback(nats_client: NatsClient) -> None:
    js = nats_client.jetstream()
    await js.add_stream(name="RUNTIME_SMOKE", subjects=["smoke.>"])
    ack = await js.publish("smoke.hello", b"hi")
    assert ack.stream == "RUNTIME_SMOKE" and ack.seq >= 1
    await js.delete_stream("RUNTIME_SMOKE")


async def test_redis_set_get(redis_client: aioredis.Redis) -> None:
    await redis_client.set("test:smoke", "ok")
    assert await redis_client.get("test:smoke") == "ok"


async def _write_state(info: RuntimeInfo, value: str) -> None:
    nc = await nats.connect(info.nats_url)
    try:
        js = nc.jetstream()
        await js.add_stream(name="PERSIST", subjects=["persist.>"])
        await js.publish("persist.one", value.encode())
    finally:
        await nc.close()
    client = aioredis.from_url(info.redis_url, decode_responses=True)
    try:
        await client.set("test:persist", value)
    finally:
        await client.aclose()


async def _read_state(info: RuntimeInfo) -> tuple[bytes, object]:
    nc = await nats.connect(info.nats_url)
    try:
        msg = await nc.jetstream().get_msg("PERSIST", seq=1)
    finally:
        await nc.close()
    client = aioredis.from_url(info.redis_url, decode_responses=True)
    try:
        return msg.data or b"", await client.get("test:persist")
    finally:
        await client.aclose()


async def test_clean_stop_then_start_keeps_streams_and_keys(tmp_path: Path) -> None:
    runtime = EmbeddedRuntime(tmp_path, auth=False)
    with runtime as first:
        await _write_state(first, "v1")
    assert not pid_alive(first.nats_pid) and not pid_alive(first.redis_pid)
    assert not (tmp_path / "runtime.json").exists()

    with runtime as second:
        assert {second.nats_pid, second.redis_pid}.isdisjoint({first.nats_pid, first.redis_pid})
        assert await _read_state(second) == (b"v1", "v1")
    assert not pid_alive(second.nats_pid) and not pid_alive(second.redis_pid)


async def test_restart_after_crash_reuses_data_and_moves_off_taken_ports(tmp_path: Path) -> None:
    runtime = EmbeddedRuntime(tmp_path, auth=False)
    first = runtime.ensure_started()
    await _write_state(first, "v2")
    for pid in (first.nats_pid, first.redis_pid):  # a crash: runtime.json stays behind
        os.kill(pid, signal.SIGKILL)
    poll_until(lambda: True if not (pid_alive(first.nats_pid) or pid_alive(first.redis_pid))
               else None, timeout=10, what="killed servers to exit")

    old_redis_port = int(first.redis_url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as squatter:  # someone else took the old Redis port meanwhile
        squatter.bind(("127.0.0.1", old_redis_port))
        squatter.listen()
        second = runtime.ensure_started()
    try:
        assert second.redis_url != first.redis_url
        assert second.nats_url == first.nats_url  # old NATS ports were free: reused
        assert EmbeddedRuntime.read_info(tmp_path) == second
        assert await _read_state(second) == (b"v2", "v2")
    finally:
        stopped = EmbeddedRuntime.stop_workdir(tmp_path)
    assert sorted(stopped) == sorted([second.nats_pid, second.redis_pid])
    assert not pid_alive(second.nats_pid) and not pid_alive(second.redis_pid)


def test_missing_package_names_the_pip_package() -> None:
    with pytest.raises(MissingBinaryError, match="'no-such-server-bin'"):
        _locate("no-such-server-bin", "bin/no-such-server", "no-such-server")
