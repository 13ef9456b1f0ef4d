"""The deploy step's environment: a wrong count is refused naming the variable (exit 2)."""
from __future__ import annotations

import pytest

from bke.adapters.bus import declare


@pytest.mark.parametrize("name,value", [("BKE_JETSTREAM_CLUSTERS", "abc"), ("BKE_JETSTREAM_CLUSTERS", "0"),
                                        ("BKE_STREAM_REPLICAS", "6"), ("BKE_STREAM_REPLICAS", "-1")])
def test_a_wrong_count_is_refused_naming_it(name: str, value: str, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("BKE_NATS_URL", "nats://127.0.0.1:1")  # never reached: refused first
    monkeypatch.setenv(name, value)
    assert declare.main() == 2
    assert f"{name}={value!r}" in caplog.text


def test_counts_in_range_are_read() -> None:
    assert declare._count("BKE_UNSET_FOR_TEST", 5) is None


def test_a_good_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BKE_STREAM_REPLICAS", "3")
    assert declare._count("BKE_STREAM_REPLICAS", 5) == 3
