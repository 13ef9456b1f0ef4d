"""End to end: nodes that join and leave an etcd cluster in place, by `bke lab apply` (issue 14,
"changed roles ... re-render and roll only the affected nodes"). Real NATS, Redis and etcd 3.5.1
members run by the kubelet stand-ins; every service and agent its own process.

A split cluster (m1 the master, etcd1 the etcd-data member, events1 the one etcd-events member)
is installed and data is written into etcd-events. Then:
1. m1 and etcd1 also become etcd-events members: each is added as a learner on events1, joined
   again by the dispatcher with its new roles (`JoinNodes.rejoin`: only its start in etcd-events,
   `--initial-cluster-state=existing`; what it runs already is left alone: etcd1's etcd-data
   member keeps running and keeps its data), promoted, and the cluster's health waited for.
   etcd-events lists three voting members, each serving the data written before; the
   apiserver's overrides name the three;
2. the first spec again: m1 and etcd1 leave etcd-events in place: each removed from the cluster
   (asked of events1, health checked after), the apiserver rolled without them, then on each
   node its member's pod stopped and its data directory removed (`LeaveEtcdMember`) and the
   etcd-events certificates it no longer needs taken away. Nobody is reset: etcd1's etcd-data
   member and m1's control plane serve throughout, with their data."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from bke.plan import plan_spec_text
from bke.runtime import etcd_put_get

from .lab_helpers import Lab, assert_reads_back, etcd_members
from tests.unit.upgrade_helpers import events_spec

# a lab of its own: an install and two membership changes, about 45 s here
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
NET = "127.0.26"
KEYS = {f"/registry/events/default/roles-{i}": f"before-the-changes-{i}" for i in range(5)}
DATA_KEYS = {f"/registry/pods/default/roles-{i}": f"etcd-data-{i}" for i in range(3)}


def _bke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *args], capture_output=True, text=True, timeout=timeout)


def _overrides(lab: Lab) -> str:
    command = lab.manifest("m1", "kube-apiserver.yaml")["spec"]["containers"][0]["command"]
    return next(a for a in command if a.startswith("--etcd-servers-overrides="))


async def test_members_join_a_second_etcd_cluster_then_leave_it_in_place(lab_factory, tmp_path: Path):
    first = events_spec("roles", NET, ("events1",))
    (tmp_path / "first.yaml").write_text(first)
    lab: Lab = lab_factory(str(tmp_path / "first.yaml"))
    assert await lab.install() == 0, lab.out.getvalue()
    ec, data = lab.plan.etcd_cluster("etcd-events"), lab.plan.etcd_cluster("etcd-data")
    assert ec is not None and data is not None
    pki = lab.host("m1") / "etc/kubernetes/pki"
    tls = (pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    for k, v in KEYS.items():
        assert await asyncio.to_thread(etcd_put_get, ec.members[0].client_url, *tls, k, v) == v
    for k, v in DATA_KEYS.items():
        assert await asyncio.to_thread(etcd_put_get, data.members[0].client_url, *tls, k, v) == v
    etcd1_data = lab.host("etcd1") / data.data_dir.lstrip("/")
    assert etcd1_data.is_dir()

    # 1. m1 (the master) and etcd1 (etcd-data's member) become etcd-events members too
    joined_text = first.replace("hostname: m1, ip: 127.0.26.1, role: [master/node]",
                                "hostname: m1, ip: 127.0.26.1, role: [master/node, etcd-event]")
    joined_text = joined_text.replace("hostname: etcd1, ip: 127.0.26.11, role: [etcd]",
                                      "hostname: etcd1, ip: 127.0.26.11, role: [etcd, etcd-event]")
    assert joined_text.count("etcd-event]") == 3
    (tmp_path / "joined.yaml").write_text(joined_text)
    done = await asyncio.to_thread(_bke, "lab", "apply", str(tmp_path / "joined.yaml"), "--workdir", str(lab.workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "etcd-member-add" in done.stdout and "apply Succeeded" in done.stdout, done.stdout
    joined = plan_spec_text(joined_text).plan
    assert joined is not None
    jec = joined.etcd_cluster("etcd-events")
    assert jec is not None and sorted(m.hostname for m in jec.members) == ["etcd1", "events1", "m1"]
    members = await etcd_members(ec.members[0].client_url, tls)
    assert sorted(m["name"] for m in members) == ["etcd1", "events1", "m1"]
    assert not any(m.get("isLearner") for m in members)
    for m in jec.members:
        await assert_reads_back(m.client_url, tls, KEYS)
    assert all(m.client_url in _overrides(lab) for m in jec.members), _overrides(lab)
    # etcd1's etcd-data member was left as it ran: one member, its data there
    assert [m["name"] for m in await etcd_members(data.members[0].client_url, tls)] == ["etcd1"]
    await assert_reads_back(data.members[0].client_url, tls, DATA_KEYS)
    events_dir = {h: lab.host(h) / jec.data_dir.lstrip("/") for h in ("m1", "etcd1")}
    assert all(d.is_dir() for d in events_dir.values())

    # 2. the first spec again: both leave etcd-events in place, nobody is reset
    done = await asyncio.to_thread(_bke, "lab", "apply", str(tmp_path / "first.yaml"), "--workdir", str(lab.workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "etcd-member-remove" in done.stdout and "cleanup" in done.stdout and "apply Succeeded" in done.stdout, done.stdout
    assert "agent stopped" not in done.stdout, done.stdout  # no node removed
    assert [m["name"] for m in await etcd_members(ec.members[0].client_url, tls)] == ["events1"]
    await assert_reads_back(ec.members[0].client_url, tls, KEYS)
    overrides = _overrides(lab)
    assert ec.members[0].client_url in overrides, overrides
    assert not any(m.client_url in overrides for m in jec.members if m.hostname != "events1"), overrides
    for h, d in events_dir.items():
        assert not d.exists(), f"{h}: {d} left behind"
        assert not (lab.host(h) / "etc/kubernetes/manifests" / jec.manifest).exists(), h
        left = sorted(p.name for p in (lab.host(h) / jec.cert_dir.lstrip("/")).glob("*") if p.name != "ca.crt")
        assert left == [], (h, left)
    # what each still runs serves, with its data
    assert [m["name"] for m in await etcd_members(data.members[0].client_url, tls)] == ["etcd1"]
    await assert_reads_back(data.members[0].client_url, tls, DATA_KEYS)
    assert etcd1_data.is_dir()
    assert (lab.host("m1") / "etc/kubernetes/manifests/kube-apiserver.yaml").is_file()
