"""The log rate limiter folds a flood of one kind of warning into a count."""
from __future__ import annotations

import logging

from bke.adapters.bus.readiness import Readiness
from bke.adapters.logs import RepeatLimiter


def _rec(msg: str, level: int = logging.ERROR, **extra) -> logging.LogRecord:
    rec = logging.LogRecord("bke.dispatcher", level, __file__, 1, msg, ("x",), None)
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_first_lines_pass_the_rest_are_counted_and_reported_once_the_window_ends():
    now = [0.0]
    lim = RepeatLimiter(burst=3, interval=60.0, clock=lambda: now[0])
    passed = [lim.filter(_rec("dead-lettered %s", rate_key="dispatcher:UnknownTarget")) for _ in range(1000)]
    assert passed.count(True) == 3
    now[0] = 61.0
    rec = _rec("dead-lettered %s", rate_key="dispatcher:UnknownTarget")
    assert lim.filter(rec) and rec.suppressed == 997 and "997 similar lines left out" in rec.getMessage()


def test_kinds_are_limited_apart_and_info_lines_never():
    lim = RepeatLimiter(burst=1, interval=60.0, clock=lambda: 0.0)
    assert lim.filter(_rec("a %s", subject="s1")) and not lim.filter(_rec("a %s", subject="s1"))
    assert lim.filter(_rec("a %s", subject="s2"))  # another subject: another kind
    assert lim.filter(_rec("b %s", subject="s1"))  # another template
    assert all(lim.filter(_rec("progress %s", level=logging.INFO)) for _ in range(100))


def test_readiness_logs_a_change_once_and_says_why(caplog):
    r = Readiness("dispatcher", ("nats", "redis"))
    r.set("nats", True)
    caplog.set_level(logging.INFO, logger="bke.readiness")
    r.set("redis", True)
    assert r.ready
    for _ in range(50):
        r.set("redis", False, "redis unreachable: ConnectionError")
    assert not r.ready and r.snapshot().reasons == ["redis unreachable: ConnectionError"]
    assert sum("not ready: redis unreachable" in m for m in caplog.messages) == 1
    r.set("redis", True)
    assert r.snapshot().ready and r.snapshot().conditions == {"nats": True, "redis": True}
