"""One loop follows every operation the CLI sends over the bus, to its end.

    send the request ──► the service answers it (accepted, rejected, renewed, ...)
                     ──► `<kind>.changed` events, each with the operation's whole view,
                         ... until the view's status is Succeeded or Failed

An operation supplies only what is its own, as a `Follow`: its answers by subject, its changed
events (`Views`: the subject, the field that holds the view, the line a view prints, the outcome
at a terminal status) and the outcome at the deadline. The loop does the rest, once for all of
them: it subscribes before it sends (no answer can slip by), keeps only the events of this
request, prints a view's line when it differs from the last one, wakes at each event or once a
second, and stops at the deadline.

The outcome is the command's exit code (`refused`, `ended`, `exit_with`), or whatever its
caller reads next (a join's `finished` event, a reset's last view). The install, whose view is
not on its events, reads it from the dispatcher at every wake instead (`Follow.poll`).
"""
from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from nats.aio.client import Client as NatsClient

from bke.adapters.bus import EventWatch, Seen
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.adapters.bus.streams import require_streams
from bke.contracts.base import schema_headers
from bke.contracts.statuses import OperationStatus

from .output import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, error_lines

__all__ = ["Follow", "Progress", "Views", "ended", "exit_with", "follow", "follow_on", "goes_on", "publish", "refused"]

T = TypeVar("T")
Doc = dict[str, Any]
Send = Callable[[NatsClient], Awaitable[None]]
TERMINAL = (OperationStatus.SUCCEEDED, OperationStatus.FAILED)  # a view with one of these statuses is over


def goes_on(doc: Doc) -> None:
    """An answer (or a terminal view) that ends nothing: another event brings the outcome."""
    return None


@dataclass(frozen=True)
class Views(Generic[T]):
    """An operation's `<kind>.changed` events: each carries its whole view, under `key`."""

    subject: str
    key: str
    line: Callable[[Doc], str]  # the progress line of a view
    say: Callable[[str], None]  # prints it
    end: Callable[[Doc], T | None] = goes_on  # at a terminal status: the outcome (None: an answer brings it)
    every_line: bool = False  # print each view's line, even one the same as the last
    settle: float | None = None  # after a terminal view without an outcome: how long its last answers may take


@dataclass(frozen=True)
class Follow(Generic[T]):
    """What one operation supplies to the loop."""

    request_id: str
    send: Send | None  # publishes the request (`publish`); None follows one sent before
    answers: Mapping[str, Callable[[Doc], T | None]]  # the service's answers by subject: the outcome, or None to go on
    gave_up: Callable[[Progress], T]  # the outcome at the deadline
    views: Views[T] | None = None
    answer_within: float | None = None  # the first answer must come by then, else TimeoutError (as EventWatch.wait_for)
    poll: Callable[[NatsClient], Awaitable[T | None]] | None = None  # once answered, at every wake: the outcome or None


@dataclass
class Progress:
    """What the loop saw of the request; `gave_up` reads it."""

    answered: bool
    view: Doc | None = None  # the last view
    line: str | None = None  # the last line printed


def publish(subject: str, body: bytes, msg_id: str) -> Send:
    """The usual `send`: the streams checked, then the request published once (JetStream keeps
    one copy per `msg_id`)."""

    async def send(nc: NatsClient) -> None:
        js = nc.jetstream()
        await require_streams(js)  # declared at deploy time; a clear error if not
        await js.publish(subject, body, headers=schema_headers({"Nats-Msg-Id": msg_id}))

    return send


def exit_with(code: int, lines: Iterable[str]) -> int:
    """Print `lines` as errors and give `code`: how an answer, an end or a deadline fails."""
    error_lines(lines)
    return code


def refused(lines: Callable[[Doc], list[str]], code: int = EXIT_INVALID) -> Callable[[Doc], int]:
    """An answer that ends the follow: its reasons on stderr and `code` (2, a refusal, unless said)."""

    def answer(doc: Doc) -> int:
        return exit_with(code, lines(doc))

    return answer


def ended(failed: Callable[[Doc], list[str]]) -> Callable[[Doc], int]:
    """The end of a view: exit 0 when it Succeeded, else its reasons on stderr and exit 1."""

    def end(view: Doc) -> int:
        return EXIT_OK if view["status"] == OperationStatus.SUCCEEDED else exit_with(EXIT_FAILURE, failed(view))

    return end


async def follow(access: BusAccess | str, op: Follow[T], timeout: float, **connect: Any) -> T:
    """Connect (`connect_nats` with `connect`), send `op`'s request, follow it to its outcome or
    to `op.gave_up` after `timeout` seconds, close."""
    deadline = time.monotonic() + timeout
    nc = await connect_nats(access, **connect)
    try:
        return await follow_on(nc, op, deadline - time.monotonic())
    finally:
        await nc.close()


async def follow_on(nc: NatsClient, op: Follow[T], timeout: float) -> T:
    """`follow` on a connection the caller holds."""
    subjects = [*op.answers, *([op.views.subject] if op.views else [])]
    async with EventWatch(nc, subjects) as watch:
        if op.send is not None:
            await op.send(nc)
        return await _Loop(op, nc, timeout).run(watch)


class _Loop(Generic[T]):
    def __init__(self, op: Follow[T], nc: NatsClient, timeout: float):
        self.op, self.nc = op, nc
        now = time.monotonic()
        self.deadline = now + timeout
        self.answer_by = now + (op.answer_within or 0.0)
        self.progress = Progress(answered=op.send is None)

    async def run(self, watch: EventWatch) -> T:
        seen = 0
        while True:
            count = len(watch.seen)
            for event in watch.seen[seen:count]:
                outcome = self._take(event)
                if outcome is not None:
                    return outcome
            seen = count
            if self.progress.answered and self.op.poll is not None:
                outcome = await self.op.poll(self.nc)
                if outcome is not None:
                    return outcome
            now = time.monotonic()
            # an answer due by `answer_within` has only that limit; the deadline is for the run
            unanswered = not self.progress.answered and self.op.answer_within is not None
            limit = self.answer_by if unanswered else self.deadline
            if now >= limit:
                if unanswered:
                    raise TimeoutError()  # as EventWatch.wait_for: the caller says who did not answer
                return self.op.gave_up(self.progress)
            # wake on the next event, or re-check once a second (a poll, the deadline)
            await watch.wait_more(count, timeout=max(0.1, min(1.0, limit - now)))

    def _take(self, event: Seen) -> T | None:
        """The outcome if this event of the request ends the follow; its line printed."""
        answer = self.op.answers.get(event.subject)
        if answer is not None and event.data.get("requestId") == self.op.request_id:
            self.progress.answered = True
            return answer(event.data)
        views = self.op.views
        if views is None or event.subject != views.subject:
            return None
        view = event.data.get(views.key)
        if not isinstance(view, dict) or view.get("requestId") != self.op.request_id:
            return None
        return self._show(views, view)

    def _show(self, views: Views[T], view: Doc) -> T | None:
        self.progress.view = view
        line = views.line(view)
        if views.every_line or line != self.progress.line:
            views.say(line)
            self.progress.line = line
        if view.get("status") not in TERMINAL:
            return None
        outcome = views.end(view)
        if outcome is None and views.settle is not None:
            self.deadline = min(self.deadline, time.monotonic() + views.settle)
        return outcome
