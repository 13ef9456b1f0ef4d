"""The lab's replica count and names (bke.lab.replicas): what `bke lab install --replicas N`
starts and what the e2e helpers find again in processes.json."""
from __future__ import annotations

import pytest

from bke.lab.replicas import MAX_REPLICAS, REPLICAS_ENV, replica_count, replica_key, replica_keys


def test_the_first_replica_keeps_the_services_own_name():
    assert [replica_key("dispatcher", i) for i in (1, 2, 3)] == ["dispatcher", "dispatcher.2", "dispatcher.3"]


def test_replica_keys_are_found_in_order_and_only_for_that_service():
    pids = {"dispatcher.10": 5, "certs": 1, "dispatcher": 2, "dispatcher.2": 3, "dispatcher-x": 9, "dispatcher.a": 8}
    assert replica_keys("dispatcher", pids) == ["dispatcher", "dispatcher.2", "dispatcher.10"]
    assert replica_keys("certs", pids) == ["certs"] and replica_keys("planner", pids) == []


def test_the_count_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.delenv(REPLICAS_ENV, raising=False)
    assert replica_count() == 1
    monkeypatch.setenv(REPLICAS_ENV, "3")
    assert replica_count() == 3 and replica_count(2) == 2


@pytest.mark.parametrize("value, where", [(0, "--replicas"), (MAX_REPLICAS + 1, "--replicas"), ("two", "--replicas")])
def test_a_bad_count_names_where_it_came_from(value, where):
    with pytest.raises(ValueError, match=f"^{where}: "):
        replica_count(value)


def test_a_bad_environment_count_names_the_variable(monkeypatch):
    monkeypatch.setenv(REPLICAS_ENV, "many")
    with pytest.raises(ValueError, match=f"^{REPLICAS_ENV}: 'many' is not a whole number"):
        replica_count()


def test_bke_lab_install_refuses_a_bad_count_before_starting_anything(tmp_path):
    from typer.testing import CliRunner

    from bke_cli.main import app

    out = CliRunner().invoke(app, ["lab", "install", "examples/seed-3m1w.yaml", "--workdir", str(tmp_path / "lab"),
                                   "--replicas", "0"])
    assert out.exit_code == 2 and "--replicas: 0 replicas" in out.output
    assert not (tmp_path / "lab").exists()  # nothing started, nothing claimed
