"""An agent's outputs: sent again while the outputs' stream is full or away, never when the
message itself is refused; a result too large for the stream is cut to fit (agent/bke_agent/outputs.py)."""
from __future__ import annotations

from typing import Any

import pytest
from nats.js.errors import BadRequestError, ServiceUnavailableError

from bke.adapters.bus.quotas import AGENT_OUTPUT_MAX_MSG
from bke.contracts.agent import CommandResult, StepResult
from bke.contracts.statuses import OperationStatus, RunStatus
from bke_agent import outputs
from bke_agent.outputs import RESULT_MOST, fit_result, publish_output, result_body


class _Js:
    def __init__(self, *failures: Exception) -> None:
        self.failures, self.sent = list(failures), []

    async def publish(self, subject: str, body: bytes, headers: dict[str, str] | None = None) -> Any:
        if self.failures:
            raise self.failures.pop(0)
        self.sent.append((subject, body))


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    waits: list[float] = []

    async def sleep(delay: float) -> None:
        waits.append(delay)

    monkeypatch.setattr(outputs.asyncio, "sleep", sleep)
    return waits


def _full() -> ServiceUnavailableError:
    return ServiceUnavailableError(code=503, err_code=10077, description="maximum bytes exceeded")


async def test_a_full_stream_is_tried_again_with_a_growing_bounded_backoff(no_waiting: list[float]) -> None:
    js = _Js(_full(), _full(), _full(), _full(), _full())
    await publish_output(js, "bke.v1.agent.c1.n1.registered", b"{}", retry_s=10.0, what="registration", ids={})  # type: ignore[arg-type]
    assert js.sent == [("bke.v1.agent.c1.n1.registered", b"{}")]
    assert no_waiting == [0.25, 0.5, 1.0, 2.0, 2.0]


async def test_past_its_time_the_last_error_is_raised() -> None:
    js = _Js(*[_full() for _ in range(20)])
    with pytest.raises(ServiceUnavailableError):
        await publish_output(js, "s", b"{}", retry_s=3.0, what="refusal", ids={})  # type: ignore[arg-type]
    assert js.sent == []


async def test_a_message_the_stream_refuses_is_not_sent_again(no_waiting: list[float]) -> None:
    js = _Js(BadRequestError(code=400, err_code=10054, description="message size exceeds maximum allowed"))
    with pytest.raises(BadRequestError):
        await publish_output(js, "s", b"{}", retry_s=10.0, what="result", ids={})  # type: ignore[arg-type]
    assert no_waiting == []


def _result(steps: int, out: int) -> CommandResult:
    return CommandResult(command_id="c1/etcd/n1/0", cluster="c1", node="n1", agent_id="a", status=OperationStatus.FAILED,
                         steps=[StepResult(id=f"s{i}", status=RunStatus.FAILED, stdout="o" * out, stderr="e" * out)
                                for i in range(steps)], started_at="t", finished_at="t")


def test_a_result_that_fits_is_sent_as_it_is() -> None:
    small = _result(3, 4096)
    assert fit_result(small) is small
    assert result_body(small) == small.to_bytes()


def test_a_result_too_large_for_the_stream_keeps_the_tails_of_its_outputs() -> None:
    big = _result(40, 4096)
    assert len(big.to_bytes()) > AGENT_OUTPUT_MAX_MSG
    cut = fit_result(big)
    assert len(cut.to_bytes()) <= RESULT_MOST
    assert [s.id for s in cut.steps] == [s.id for s in big.steps] and cut.status == OperationStatus.FAILED
    assert cut.steps[0].stderr.endswith("e" * 1024) and cut.steps[0].stderr.startswith("[cut to fit")
    assert result_body(big) == cut.to_bytes()
    huge = _result(2000, 4096)
    assert len(fit_result(huge).to_bytes()) <= len(_result(2000, 0).to_bytes())
