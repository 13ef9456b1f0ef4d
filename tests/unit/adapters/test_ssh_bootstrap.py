"""The executor over a fake session: order, first failure stops a node, bounded concurrency, outcomes."""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from bke.adapters.ssh import (
    BootstrapParams,
    HostKeyRefused,
    SshAuthRefused,
    SshUnreachable,
    UploadFailed,
    bootstrap_node,
    bootstrap_nodes,
    bootstrap_steps,
    remote_command,
)


@dataclass
class Done:
    exit_status: int | None
    stdout: str = ""
    stderr: str = ""


@dataclass
class FakeSession:
    fail: str | None = None  # a command string containing this fails
    drop: str | None = None  # the connection drops on a command containing this
    upload_error: Exception | None = None
    key: str = "PUBKEY-n"
    log: list[tuple[str, str]] = field(default_factory=list)

    async def run(self, command: str, timeout_s: float) -> Done:
        self.log.append(("run", command))
        if self.drop and self.drop in command:
            raise SshUnreachable("n1 (10.0.0.1:22): connection lost (reset)")
        if self.fail and self.fail in command:
            return Done(3, "", "boom\nlast line says why")
        return Done(0, self.key + "\n" if command.endswith(" init") else "")

    async def upload(self, data: bytes, remote_path: str, mode: int) -> None:
        if self.upload_error:
            raise self.upload_error
        self.log.append(("upload", f"{remote_path} {mode:04o} {len(data)}"))


@pytest.fixture
def steps(tmp_path):
    wheel = tmp_path / "bke-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("x==1\n")
    return bootstrap_steps(BootstrapParams("prod", "n1", "nats://10.0.0.9:4222", wheel, reqs))


async def test_commands_run_in_table_order_uploads_after_the_staging_dir(steps):
    s = FakeSession()
    out = await bootstrap_node(s, steps, "n1", "10.0.0.1:22")
    assert out.ok and out.public_key == "PUBKEY-n" and out.step is None
    assert [c for kind, c in s.log if kind == "run"] == [remote_command(st.argv) for st in steps]
    assert s.log[0] == ("run", "mkdir -m 0700 -p -- .bke-bootstrap")
    assert [c for _, c in s.log[1:5]] == [
        ".bke-bootstrap/bke-0.1.0-py3-none-any.whl 0600 5", ".bke-bootstrap/requirements.txt 0600 5",
        f".bke-bootstrap/bke-agent.service 0600 {len(steps[0].uploads[2].source.text)}",
        f".bke-bootstrap/env 0600 {len(steps[0].uploads[3].source.text)}",
    ]


async def test_first_failure_stops_the_node_and_names_step_exit_and_stderr(steps):
    s = FakeSession(fail="systemctl restart")
    out = await bootstrap_node(s, steps, "n1", "10.0.0.1:22")
    assert (out.status, out.step) == ("failed", "restart")
    assert "exit 3" in out.message and "last line says why" in out.message
    assert s.log[-1] == ("run", "systemctl restart bke-agent.service")  # init and cleanup never ran


async def test_upload_refused_or_connection_lost_names_the_step(steps):
    s = FakeSession(upload_error=UploadFailed("n1 (10.0.0.1:22): no SFTP subsystem"))
    out = await bootstrap_node(s, steps, "n1", "10.0.0.1:22")
    assert (out.status, out.step, out.message) == ("failed", "stage", "n1 (10.0.0.1:22): no SFTP subsystem")
    out = await bootstrap_node(FakeSession(drop="pip install"), steps, "n1", "10.0.0.1:22")
    assert (out.status, out.step) == ("unreachable", "install-requirements") and "connection lost" in out.message


async def test_no_public_key_is_a_failure(steps):
    out = await bootstrap_node(FakeSession(key=""), steps, "n1", "10.0.0.1:22")
    assert (out.status, out.step, out.message) == ("failed", "init", "bke-agent init printed no public key")


async def test_concurrency_is_bounded_and_used(steps):
    active = peak = 0
    cond = asyncio.Condition()
    release = asyncio.Event()

    @asynccontextmanager
    async def open_session(node: str) -> AsyncIterator[FakeSession]:
        nonlocal active, peak
        async with cond:
            active += 1
            peak = max(peak, active)
            cond.notify_all()
        await release.wait()
        try:
            yield FakeSession(key=f"PUBKEY-{node}")
        finally:
            active -= 1

    nodes = [(f"n{i}", f"10.0.0.{i}:22") for i in range(10)]
    run = asyncio.create_task(bootstrap_nodes(nodes, lambda n: steps, open_session, concurrency=3))
    async with cond:
        await cond.wait_for(lambda: active == 3)
    release.set()
    outcomes = await run
    assert peak == 3
    assert [o.node for o in outcomes] == [n for n, _ in nodes]
    assert [o.public_key for o in outcomes] == [f"PUBKEY-n{i}" for i in range(10)]


async def test_connection_errors_become_outcomes_and_other_nodes_carry_on(steps):
    errors = {
        "a": HostKeyRefused("host key for a (1.1.1.1:22) does not match", "SHA256:x"),
        "b": SshAuthRefused("b: public-key authentication refused"),
        "c": SshUnreachable("c: cannot connect"),
    }

    @asynccontextmanager
    async def open_session(node: str) -> AsyncIterator[FakeSession]:
        if node in errors:
            raise errors[node]
        yield FakeSession()

    nodes = [(n, "addr") for n in ("a", "b", "c", "d")]
    outcomes = await bootstrap_nodes(nodes, lambda n: steps, open_session)
    assert [(o.status, o.step) for o in outcomes] == [
        ("refused", "connect"), ("refused", "authenticate"), ("unreachable", "connect"), ("ok", None)]
    assert outcomes[0].message == str(errors["a"])


async def test_concurrency_must_be_positive(steps):
    with pytest.raises(ValueError):
        await bootstrap_nodes([], lambda n: steps, None, concurrency=0)  # type: ignore[arg-type]

