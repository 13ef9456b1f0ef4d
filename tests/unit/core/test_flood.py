"""Counting one node's stray outputs per window and the flood bound (bke.core.flood): pure."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from bke.core.flood import FLOOD_LIMIT, FloodCounter, FloodLimit

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
LIMIT = FloodLimit(outputs=3, window_s=60.0, tracked=100)


def _at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def test_a_node_within_the_bound_is_never_reported_and_keeps_its_payloads() -> None:
    c = FloodCounter(LIMIT)
    verdicts = [c.note("c1", "n1", 100, True, _at(i)) for i in range(3)]
    assert all(v.report is None and v.keep_payload and not v.flooding for v in verdicts)


def test_past_the_bound_one_report_per_window_with_the_counts_so_far() -> None:
    c = FloodCounter(LIMIT)
    for i in range(3):
        c.note("c1", "n1", 10, i == 0, _at(i))
    v = c.note("c1", "n1", 1000, True, _at(5))
    assert v.flooding and not v.keep_payload and v.report is not None
    r = v.report
    assert (r.cluster, r.node, r.outputs, r.malformed, r.bytes, r.since, r.bound) == ("c1", "n1", 4, 2, 1030, _at(0), 3)
    later = [c.note("c1", "n1", 10, True, _at(10 + i)) for i in range(50)]
    assert all(x.report is None and x.flooding and not x.keep_payload for x in later)


def test_the_next_window_reports_again_and_keeps_no_payload_while_the_flood_goes_on() -> None:
    c = FloodCounter(LIMIT)
    for i in range(5):
        c.note("c1", "n1", 10, True, _at(i))
    first = c.note("c1", "n1", 10, True, _at(61))  # a new window, right after a flood
    assert first.report is None and not first.flooding and not first.keep_payload
    for i in range(2):
        c.note("c1", "n1", 10, True, _at(62 + i))
    again = c.note("c1", "n1", 10, True, _at(70))
    assert again.report is not None and again.report.since == _at(61)


def test_a_quiet_node_is_back_to_normal_after_a_whole_window() -> None:
    c = FloodCounter(LIMIT)
    for i in range(5):
        c.note("c1", "n1", 10, True, _at(i))
    v = c.note("c1", "n1", 10, True, _at(200))
    assert not v.flooding and v.keep_payload


def test_nodes_and_clusters_are_counted_apart() -> None:
    c = FloodCounter(LIMIT)
    for i in range(10):
        c.note("c1", "n1", 10, False, _at(i))
    assert c.note("c1", "n2", 10, False, _at(11)).keep_payload
    assert c.note("c2", "n1", 10, False, _at(11)).keep_payload


def test_the_windows_kept_are_bounded_ended_ones_go_first() -> None:
    c = FloodCounter(FloodLimit(outputs=3, window_s=60.0, tracked=4))
    for i in range(4):
        c.note("c1", f"old{i}", 1, False, _at(0))
    c.note("c1", "flooder", 1, False, _at(100))  # the old windows ended: they go
    assert c.tracked() == 1
    for i in range(3):
        c.note("c1", f"new{i}", 1, False, _at(101))
    c.note("c1", "one-more", 1, False, _at(102))  # none ended: the oldest half goes
    assert c.tracked() <= 4


def test_the_bound_leaves_room_for_a_working_agent() -> None:
    # one command at a time and a health round a minute: a working node's strays in a minute
    # are a handful; the bound is well above that and far below a flood's rate
    assert FLOOD_LIMIT.outputs >= 10 and FLOOD_LIMIT.window_s >= 30
