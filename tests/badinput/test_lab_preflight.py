"""The lab's preflight (bke.lab.preflight): a lab whose addresses or ports are anyone else's, or
whose hostnames belong to another cluster of the same workdir, is refused before it starts."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bke.lab.preflight import CLAIM_GRACE_S, NODES_FILE, claim_lab
from bke.core.plan import Plan, plan_spec_text
from bke.core.plan.ports import node_ports
from bke.core.node_steps import component_ports

SEED = Path("examples/seed-3m1w.yaml").read_text()
BASE = "127.77.0."  # loopback addresses no other test uses


def plan_of(text: str) -> Plan:
    outcome = plan_spec_text(text.replace("127.0.10.", BASE))
    assert outcome.plan is not None, outcome.errors
    return outcome.plan


@pytest.fixture
def registry(tmp_path):
    return tmp_path / "registry"


@pytest.fixture
def listener():
    socks = []

    def listen(ip: str, port: int) -> None:
        s = socket.socket()
        s.bind((ip, port))
        s.listen()
        socks.append(s)

    yield listen
    for s in socks:
        s.close()


def fake_processes(workdir: Path, pid: int | None) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    agents = {"master1": pid} if pid else {}
    (workdir / "processes.json").write_text(json.dumps({"services": {}, "agents": agents}))


def test_a_port_held_by_another_program_is_refused_before_anything_is_claimed(tmp_path, registry, listener):
    plan = plan_of(SEED)
    listener(BASE + "2", 2379)
    problems = claim_lab(tmp_path / "lab", plan, registry=registry)
    assert problems == [
        f"nodes[1].spec.ip: port(s) in use on {BASE}2: 2379 (etcd-data client); another program (or a lab not started by "
        "this user) listens there, and the node's components would fail with 'address already in use'; free them or use "
        "other addresses"
    ]
    assert not (tmp_path / "lab" / NODES_FILE).exists() and not list(registry.glob("*.json"))


def test_a_second_lab_on_the_same_addresses_is_refused_while_the_first_runs(tmp_path, registry):
    plan = plan_of(SEED)
    first, second = tmp_path / "first", tmp_path / "second"
    assert claim_lab(first, plan, registry=registry) == []
    fake_processes(first, os.getpid())  # the first lab is up: a live process of its own
    problems = claim_lab(second, plan, registry=registry)
    assert len(problems) == 4 and problems[0].startswith(f"nodes[0].spec.ip: {BASE}1 is served by the lab in {first.resolve()}")
    assert f"bke lab down --workdir {first.resolve()}" in problems[0]
    fake_processes(first, None)  # `bke lab down` empties processes.json: the claims are stale
    assert claim_lab(second, plan, registry=registry) == []


def test_a_lab_that_is_still_starting_holds_its_claim_for_a_grace_period(tmp_path, registry):
    plan = plan_of(SEED)
    now = time.time()
    assert claim_lab(tmp_path / "first", plan, registry=registry, now=now) == []
    assert claim_lab(tmp_path / "second", plan, registry=registry, now=now + 1)  # no process recorded yet: starting
    assert claim_lab(tmp_path / "second", plan, registry=registry, now=now + CLAIM_GRACE_S + 1) == []


def test_a_second_cluster_with_clashing_hostnames_in_one_workdir_is_refused(tmp_path, registry):
    lab = tmp_path / "lab"
    assert claim_lab(lab, plan_of(SEED), registry=registry) == []
    other = plan_of(SEED.replace("name: seed\n", "name: other\n").replace("127.0.10.", "127.0.11."))
    problems = claim_lab(lab, other, registry=registry)
    assert len(problems) == 4
    assert problems[0] == (f"nodes[0].spec.hostname: 'master1' is already a node of cluster 'seed' in lab {lab.resolve()} "
                           "(its node root is still on disk: hosts/master1/); use other hostnames or another --workdir")


def test_rerunning_the_same_lab_passes_although_its_own_pods_hold_the_ports(tmp_path, registry, listener):
    lab, plan = tmp_path / "lab", plan_of(SEED)
    assert claim_lab(lab, plan, registry=registry) == []
    fake_processes(lab, os.getpid())  # master1's agent runs ...
    listener(BASE + "1", 2379)  # ... and so does its etcd
    assert claim_lab(lab, plan, registry=registry) == []
    fake_processes(lab, None)  # the agent is gone but something still holds the port
    assert "2379 (etcd-data client)" in claim_lab(lab, plan, registry=registry)[0]


@pytest.mark.parametrize("spec", ["examples/seed-3m1w.yaml", "examples/split-etcd.yaml"])
def test_the_port_table_is_the_dispatchers(spec):
    plan = plan_spec_text(Path(spec).read_bytes()).plan
    assert plan is not None
    for node in plan.nodes:
        assert list(node_ports(plan, node)) == component_ports(plan, node)


def test_bke_lab_install_refuses_a_busy_address_before_starting_anything(tmp_path, listener):
    spec = tmp_path / "seed.yaml"
    spec.write_text(SEED.replace("127.0.10.", BASE))
    listener(BASE + "1", 6443)
    env = dict(os.environ, BKE_LAB_REGISTRY=str(tmp_path / "registry"))
    bke = Path(sys.executable).parent / "bke"
    r = subprocess.run([str(bke), "lab", "install", str(spec), "--workdir", str(tmp_path / "lab")],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"nodes[0].spec.ip: port(s) in use on {BASE}1: 6443 (kube-apiserver)" in r.stdout + r.stderr
    assert not (tmp_path / "lab" / "runtime").exists() and not (tmp_path / "lab" / "processes.json").exists()
