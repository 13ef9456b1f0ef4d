"""The executor's rules, with a scripted backend: retries with backoff, per-step timeout,
truncated output, stop at the first failed step, identical files skipped, sealed content
opened only when written and never shown."""
from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand, OUTPUT_LIMIT
from bke.contracts.agent_steps import RunProgram, Step, WriteFile
from bke.core.secrets.sealing import seal
from bke_agent import AgentIdentity, Executor, LabBackend, PermanentStepError, StepError, StepOutcome, clip
from bke_agent.backends.base import Content

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Scripted:
    """A backend whose step outcomes are functions of (step id, attempt)."""

    kind = "lab"

    def __init__(self, script: dict[str, Callable[[int], StepOutcome]]) -> None:
        self.script = script
        self.calls: list[str] = []

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def execute(self, step: Step, content: Content) -> StepOutcome:
        self.calls.append(step.id)
        attempt = self.calls.count(step.id)
        return await asyncio.sleep(0, self.script[step.id](attempt)) if step.id in self.script else StepOutcome()


def _cmd(*steps: Step) -> AgentCommand:
    return AgentCommand(command_id="c1/p/n1/0", cluster="c1", node="n1", phase="p", issued_at=NOW.isoformat(),
                        steps=list(steps))


def _run(step_id: str, **kw: object) -> RunProgram:
    return RunProgram(id=step_id, argv=["true"], **kw)


def _executor(backend: object, sleeps: list[float] | None = None) -> Executor:
    async def fake_sleep(s: float) -> None:
        if sleeps is not None:
            sleeps.append(s)

    return Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW, sleep=fake_sleep)  # type: ignore[arg-type]


async def test_retries_with_exponential_backoff_then_success() -> None:
    def flaky(attempt: int) -> StepOutcome:
        if attempt < 3:
            raise StepError(f"attempt {attempt} failed", exit_code=1)
        return StepOutcome(stdout=b"fine")

    sleeps: list[float] = []
    backend = Scripted({"a": flaky})
    result = await _executor(backend, sleeps).run(_cmd(_run("a", retries=3, backoff_s=0.5)))
    assert result.status == "Succeeded"
    assert result.steps[0].attempts == 3 and result.steps[0].stdout == "fine"
    assert sleeps == [0.5, 1.0]


async def test_retries_exhausted_reports_last_error() -> None:
    def always(attempt: int) -> StepOutcome:
        raise StepError("boom", exit_code=7, stderr=f"stderr of attempt {attempt}")

    result = await _executor(Scripted({"a": always})).run(_cmd(_run("a", retries=2, backoff_s=0)))
    step = result.steps[0]
    assert (result.status, step.status, step.attempts, step.exit_code) == ("Failed", "Failed", 3, 7)
    assert step.stderr == "stderr of attempt 3"


async def test_permanent_error_is_not_retried() -> None:
    def refused(attempt: int) -> StepOutcome:
        raise PermanentStepError("no")

    backend = Scripted({"a": refused})
    result = await _executor(backend).run(_cmd(_run("a", retries=5)))
    assert result.steps[0].attempts == 1 and backend.calls == ["a"]


async def test_timeout_per_step() -> None:
    class Slow(Scripted):
        async def execute(self, step: Step, content: Content) -> StepOutcome:
            self.calls.append(step.id)
            await asyncio.Event().wait()  # never set: only the timeout ends it
            raise AssertionError("unreachable")

    result = await _executor(Slow({})).run(_cmd(_run("slow", timeout_s=0.05, retries=1, backoff_s=0)))
    step = result.steps[0]
    assert step.status == "Failed" and step.attempts == 2
    assert "timed out after 0.05s" in step.stderr


async def test_stops_at_first_failed_step() -> None:
    def fail(attempt: int) -> StepOutcome:
        raise StepError("second step broke")

    backend = Scripted({"b": fail})
    result = await _executor(backend).run(_cmd(_run("a"), _run("b"), _run("c")))
    assert [s.id for s in result.steps] == ["a", "b"]
    assert [s.status for s in result.steps] == ["Succeeded", "Failed"]
    assert backend.calls == ["a", "b"] and result.status == "Failed"


async def test_unexpected_exception_is_a_failed_attempt() -> None:
    def bug(attempt: int) -> StepOutcome:
        raise KeyError("oops")

    result = await _executor(Scripted({"a": bug})).run(_cmd(_run("a")))
    assert result.steps[0].status == "Failed" and "KeyError" in result.steps[0].stderr


def test_clip_keeps_the_tail_within_the_limit() -> None:
    assert clip(b"short") == "short"
    text = clip(b"x" * 10_000 + b"THE END")
    assert len(text.encode()) <= OUTPUT_LIMIT and text.endswith("THE END") and text.startswith("[truncated 10007")
    multibyte = clip(("é" * 5000).encode())  # 2 bytes each: the cut must not split a character
    assert len(multibyte.encode()) <= OUTPUT_LIMIT and "\ufffd" not in multibyte


async def test_output_is_truncated_in_results() -> None:
    big = StepOutcome(stdout=b"o" * 100_000, stderr=b"e" * 100_000)
    result = await _executor(Scripted({"a": lambda n: big})).run(_cmd(_run("a")))
    assert len(result.steps[0].stdout.encode()) <= OUTPUT_LIMIT
    assert len(result.steps[0].stderr.encode()) <= OUTPUT_LIMIT


def _write(path: str, data: bytes, identity: AgentIdentity | None = None, mode: int = 0o600) -> WriteFile:
    digest = hashlib.sha256(data).hexdigest()
    if identity is None:
        return WriteFile(id=f"w:{path}", path=path, mode=mode, content_b64=base64.b64encode(data).decode(), sha256=digest)
    from bke.core.secrets.sealing import public_key_from_raw

    blob = seal(public_key_from_raw(base64.b64decode(identity.public_key_b64)), data)
    return WriteFile(id=f"w:{path}", path=path, mode=mode, sealed_b64=base64.b64encode(blob).decode(), sha256=digest)


async def test_identical_file_is_skipped_and_sealed_content_not_opened(tmp_path: Path) -> None:
    identity = AgentIdentity.ephemeral()
    backend = LabBackend(tmp_path / "node", "127.0.0.1")
    executor = Executor(backend, identity, now=lambda: NOW)
    secret = b"-----BEGIN PRIVATE KEY-----\nTOP SECRET\n"
    step = _write("/etc/kubernetes/pki/sa.key", secret, identity)

    first = await executor.run(_cmd(step))
    assert first.steps[0].status == "Succeeded"
    written = tmp_path / "node/etc/kubernetes/pki/sa.key"
    assert written.read_bytes() == secret and (written.stat().st_mode & 0o777) == 0o600

    opened: list[int] = []
    original = identity.open_sealed
    object.__setattr__(identity, "open_sealed", lambda blob: opened.append(1) or original(blob))
    second = await executor.run(_cmd(step))
    assert second.steps[0].status == "Skipped" and opened == []

    written.chmod(0o644)  # same bytes, wrong mode: rewritten
    third = await executor.run(_cmd(step))
    assert third.steps[0].status == "Succeeded" and (written.stat().st_mode & 0o777) == 0o600
    assert "TOP SECRET" not in first.model_dump_json() + second.model_dump_json() + third.model_dump_json()


async def test_sealed_to_another_agent_fails_without_leaking(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    other = AgentIdentity.ephemeral()
    step = _write("/etc/kubernetes/pki/ca.key", b"SECRET-KEY-MATERIAL", other)
    executor = Executor(LabBackend(tmp_path / "node", "127.0.0.1"), AgentIdentity.ephemeral(), now=lambda: NOW)
    result = await executor.run(_cmd(step.model_copy(update={"retries": 3})))
    s = result.steps[0]
    assert s.status == "Failed" and s.attempts == 1 and "NotForThisKey" in s.stderr
    assert "SECRET-KEY-MATERIAL" not in result.model_dump_json() + caplog.text


async def test_content_must_match_its_sha256(tmp_path: Path) -> None:
    step = _write("/etc/kubernetes/admin.conf", b"real").model_copy(update={"sha256": "0" * 64})
    executor = Executor(LabBackend(tmp_path / "node", "127.0.0.1"), AgentIdentity.ephemeral(), now=lambda: NOW)
    result = await executor.run(_cmd(step))
    assert result.steps[0].status == "Failed" and "does not match its sha256" in result.steps[0].stderr

