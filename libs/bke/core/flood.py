"""Counting one node's stray outputs per window, and deciding when that is a flood: pure.

A stray output is one an agent sent that answers no command in flight (a result the consumer
drops: not from the node's accepted agent, for another incarnation, for a command already
settled; a refusal, which never settles a command) or that is no message of the contract at all.
A working agent sends few: it runs one command at a time, and its consumer takes almost every
answer. A node past `FloodLimit.outputs` in one window is flooding: it is reported once for that
window (`FloodVerdict.report`), and its malformed outputs are no longer dead-lettered one by one
(`FloodVerdict.keep_payload`), for that window and the next (a flood that goes on gets one report
per window and no payloads at all), so that the dead-letter stream does not become its target.

The window of a node starts at its first stray output and lasts `window_s`; the next stray
output after it starts a new one. Time is given (`now`), never read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

__all__ = ["FLOOD_LIMIT", "FloodCounter", "FloodLimit", "FloodReport", "FloodVerdict"]


@dataclass(frozen=True)
class FloodLimit:
    outputs: int  # more than this many stray outputs of one node in a window is a flood
    window_s: float
    tracked: int  # nodes whose windows are kept at most (a window that ended is forgotten first)


# Why these sizes: a node's legitimate stray outputs are a few per window at most (a result sent
# again after a redelivery, a late answer to a retried command, a refusal of each command it
# would not run; commands come one at a time, a health round a minute plus an operation's
# steps). 30 in a minute is several times that, and an agent flooding with the largest messages
# passes it within a fraction of a second. 20,000 windows cover two clusters of the largest size
# all misbehaving at once; past it, windows that ended are dropped first.
FLOOD_LIMIT = FloodLimit(outputs=30, window_s=60.0, tracked=20_000)


@dataclass(frozen=True)
class FloodReport:
    cluster: str
    node: str
    outputs: int
    malformed: int
    bytes: int
    since: datetime
    window_s: float
    bound: int  # FloodLimit.outputs


@dataclass(frozen=True)
class FloodVerdict:
    report: FloodReport | None  # set once per window: the output that made it a flood
    keep_payload: bool  # whether a malformed output may still be dead-lettered with its bytes
    flooding: bool


@dataclass
class _Window:
    since: datetime
    outputs: int = 0
    malformed: int = 0
    bytes: int = 0
    reported: bool = False
    after_flood: bool = False  # the node's previous window was a flood


@dataclass
class FloodCounter:
    limit: FloodLimit = FLOOD_LIMIT
    _windows: dict[tuple[str, str], _Window] = field(default_factory=dict)

    def note(self, cluster: str, node: str, size: int, malformed: bool, now: datetime) -> FloodVerdict:
        """Count one stray output of `size` bytes of (cluster, node) at `now`."""
        key = (cluster, node)
        w = self._window(key, now)
        w.outputs += 1
        w.malformed += int(malformed)
        w.bytes += size
        flooding = w.outputs > self.limit.outputs
        report = None
        if flooding and not w.reported:
            w.reported = True
            report = FloodReport(cluster, node, w.outputs, w.malformed, w.bytes, w.since, self.limit.window_s,
                                 self.limit.outputs)
        return FloodVerdict(report, keep_payload=not (flooding or w.after_flood), flooding=flooding)

    def _window(self, key: tuple[str, str], now: datetime) -> _Window:
        w = self._windows.get(key)
        if w is not None and now - w.since < timedelta(seconds=self.limit.window_s):
            return w
        # a new window; it follows a flood only if the last one was one and ended just now
        follows = w is not None and w.reported and now - w.since < timedelta(seconds=2 * self.limit.window_s)
        if w is None and len(self._windows) >= self.limit.tracked:
            self._forget(now)
        self._windows[key] = fresh = _Window(since=now, after_flood=follows)
        return fresh

    def _forget(self, now: datetime) -> None:
        """Make room: windows that ended go; if none has, the oldest half."""
        ended = [k for k, w in self._windows.items() if now - w.since >= timedelta(seconds=self.limit.window_s)]
        if not ended:
            ended = sorted(self._windows, key=lambda k: self._windows[k].since)[: max(1, len(self._windows) // 2)]
        for k in ended:
            del self._windows[k]

    def tracked(self) -> int:
        return len(self._windows)
