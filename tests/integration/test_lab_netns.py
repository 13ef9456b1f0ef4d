"""The lab's network namespaces for real (iproute2, as root): made from a plan, reachable from the
root namespace both ways, completed after a half-made run, and gone after removal. Skips, with
the host's reason, where `ip netns add` is not permitted."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from bke.core.plan import plan_spec_text
from bke.lab.netns_ops import (NETNS_DIR, ensure_workdir_network, netns_unavailable, recorded_network,
                               remove_workdir_network)
from bke_agent.lab_netns import socket_in_netns

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def plan():
    why = netns_unavailable()
    if why:
        pytest.skip(why)
    text = (ROOT / "examples/seed-3m1w.yaml").read_text().replace("127.0.10.", "198.18.43.")
    planned = plan_spec_text(text.encode()).plan
    assert planned is not None
    return planned


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def test_masters_get_namespaces_the_worker_stays_on_the_bridge_and_down_removes_it_all(tmp_path, plan) -> None:
    net = ensure_workdir_network(tmp_path, plan)
    try:
        assert net is not None and recorded_network(tmp_path) == net
        assert [h.hostname for h in net.hosts] == ["master1", "master2", "master3"]
        for h in net.hosts:
            assert f"inet {h.ip}/24" in _ip("-n", h.netns, "addr", "show", "dev", "eth0")
        # a namespace's listener answers the root namespace across the bridge, and the worker's
        # address (on the bridge, root side) answers the namespace
        with socket_in_netns(net.hosts[0].netns) as server:
            server.bind((net.hosts[0].ip, 0))
            server.listen()
            with socket.create_connection(server.getsockname(), timeout=5):
                pass
        with socket.socket() as worker:
            worker.bind(("198.18.43.4", 0))
            worker.listen()
            with socket_in_netns(net.hosts[1].netns) as client:
                client.settimeout(5)
                client.connect(worker.getsockname())
        # a killed run left a veth without its peer: the next ensure completes the network
        _ip("-n", net.hosts[2].netns, "link", "del", "eth0")
        assert ensure_workdir_network(tmp_path, plan) == net
        assert f"inet {net.hosts[2].ip}/24" in _ip("-n", net.hosts[2].netns, "addr", "show", "dev", "eth0")
    finally:
        assert remove_workdir_network(tmp_path)
    assert not any((NETNS_DIR / h.netns).exists() for h in net.hosts)
    assert net.bridge not in _ip("link", "show") and recorded_network(tmp_path) is None
    assert not remove_workdir_network(tmp_path)  # nothing recorded: nothing to do
