"""1,000 nodes against one real control plane: a real master (built kube-apiserver,
controller-manager, scheduler and etcd), 999 null agents whose Nodes kwok keeps Ready. The
install's node-labels and health phases work on the real Node objects; the time is reported.
(bench/install.py --control-plane real runs the same at any size.)"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from .real_cp_helpers import kubectl_json, need_binaries

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500)]
NODES = 1000


def _bench():
    spec = importlib.util.spec_from_file_location("bench_real_cp", Path("bench/real_cp.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # registered before it runs: its dataclasses resolve their string annotations through it
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def test_a_thousand_kwok_nodes_are_labelled_and_checked_through_the_real_api(tmp_path, capsys):
    bench = _bench()
    need_binaries(bench.KUBERNETES)
    async with bench.real_install(NODES, tmp_path / "lab", timeout_s=1200.0) as r:
        with capsys.disabled():
            print("\n" + bench.summary(r))
        assert r["status"] == "Succeeded", r
        assert r["registered"] == NODES - 1
        nodes = kubectl_json(bench.KUBERNETES, r["admin_conf"], "get", "nodes")["items"]
        assert len(nodes) == NODES
        not_ready = [n["metadata"]["name"] for n in nodes
                     if next(c for c in n["status"]["conditions"] if c["type"] == "Ready")["status"] != "True"]
        assert not_ready == []
        # BKE's labels, through the API: every worker is a worker, the master a control plane
        roles = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
        assert all("node-role.kubernetes.io/worker" in roles[f"n{i}"] for i in range(1, NODES))
        assert "node-role.kubernetes.io/control-plane" in roles["n0"]
        for ds in ("kube-proxy", "calico-node"):
            st = kubectl_json(bench.KUBERNETES, r["admin_conf"], "-n", "kube-system", "get", "daemonset", ds)["status"]
            assert st["desiredNumberScheduled"] == st["numberReady"] == NODES, (ds, st)
        assert r["phases"]["node-labels"] > 0 and r["phases"]["health"] > 0
