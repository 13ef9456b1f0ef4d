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
   member and m1's control plane serve throughout, with their data.

And on the seed (three stacked masters, one worker):
1. node1, the worker, becomes an etcd-data member while master3 stops being one: node1 added as
   a learner, joined again (its kubelet and kube-proxy kept), promoted; then master3 removed,
   the members that stay and every apiserver rolled, master3's member taken away on its node
   (its apiserver, controller-manager and scheduler keep running);
2. node1 becomes etcd-only ([node, etcd] -> [etcd]): drained, its kubelet rolled to run
   standalone (not uncordoned), the files only a registering node has taken away, then its
   Node object deleted (the lab records each API action); its etcd member serves throughout."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bke.plan import plan_spec_text
from bke.render.context import RenderInputs
from bke.render.render import render_cluster
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


SEED_NET = "127.0.27"


def _seed(**roles: str) -> str:
    text = Path("examples/seed-3m1w.yaml").read_text().replace("127.0.10.", f"{SEED_NET}.")
    for host, role in roles.items():
        line = next(x for x in text.splitlines() if f"hostname: {host}," in x)
        text = text.replace(line, line[:line.index("role: [")] + f"role: [{role}]}}")
    return text


async def test_a_stacked_master_leaves_etcd_a_worker_joins_it_then_stops_registering(lab_factory, tmp_path: Path):
    (tmp_path / "seed.yaml").write_text(_seed())
    lab: Lab = lab_factory(str(tmp_path / "seed.yaml"))
    assert await lab.install(timeout=480.0) == 0, lab.out.getvalue()
    data = lab.plan.etcd_cluster("etcd-data")
    assert data is not None and [m.hostname for m in data.members] == ["master1", "master2", "master3"]
    pki = lab.host("master1") / "etc/kubernetes/pki"
    tls = (pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    for k, v in DATA_KEYS.items():
        assert await asyncio.to_thread(etcd_put_get, data.members[0].client_url, *tls, k, v) == v

    # 1. node1 joins etcd-data, master3 leaves it in place
    swap = _seed(master3="master/node", node1="node, etcd")
    (tmp_path / "swap.yaml").write_text(swap)
    done = await asyncio.to_thread(_bke, "lab", "apply", str(tmp_path / "swap.yaml"), "--workdir", str(lab.workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "etcd-member-remove" in done.stdout and "apply Succeeded" in done.stdout, done.stdout
    swapped = plan_spec_text(swap).plan
    assert swapped is not None
    sdata = swapped.etcd_cluster("etcd-data")
    assert sdata is not None
    node1 = sdata.member("node1")
    assert node1 is not None
    members = await etcd_members(sdata.members[0].client_url, tls)
    assert sorted(m["name"] for m in members) == ["master1", "master2", "node1"]
    assert not any(m.get("isLearner") for m in members)
    for m in sdata.members:
        await assert_reads_back(m.client_url, tls, DATA_KEYS)
    m3 = lab.host("master3")
    assert not (m3 / data.data_dir.lstrip("/")).exists() and not (m3 / "etc/kubernetes/manifests" / data.manifest).exists()
    assert sorted(p.name for p in (m3 / data.cert_dir.lstrip("/")).glob("*")) == ["ca.crt"]  # its apiserver's CA
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert (m3 / f"etc/kubernetes/manifests/{component}.yaml").is_file(), component
    command = lab.manifest("master3", "kube-apiserver.yaml")["spec"]["containers"][0]["command"]
    servers = next(a for a in command if a.startswith("--etcd-servers="))
    gone = data.member("master3")
    assert gone is not None and node1.client_url in servers and gone.client_url not in servers, servers

    # 2. node1 stops registering: [node, etcd] -> [etcd]
    only = _seed(master3="master/node", node1="etcd")
    (tmp_path / "only.yaml").write_text(only)
    done = await asyncio.to_thread(_bke, "lab", "apply", str(tmp_path / "only.yaml"), "--workdir", str(lab.workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "delete-node-objects" in done.stdout and "apply Succeeded" in done.stdout, done.stdout
    import redis

    r = redis.Redis.from_url(lab.info.redis_url, decode_responses=True)
    api = json.loads(r.hget(f"bke:{lab.plan.cluster}:upgrade:drain", "node1") or "{}")  # type: ignore[arg-type]
    assert "uncordoned" not in api and api["cordoned"] <= api["drained"] <= api["deleted"], api
    etcd_only = plan_spec_text(only).plan
    assert etcd_only is not None and not etcd_only.node("node1").registers
    want = {f.path: f.content for f in render_cluster(etcd_only, RenderInputs(vrrp_password="x")).node("node1").files}
    n1 = lab.host("node1")
    for path in ("/var/lib/kubelet/config.yaml", "/etc/systemd/system/kubelet.service"):
        assert (n1 / path.lstrip("/")).read_bytes() == want[path], path  # the standalone kubelet's
    for path in ("etc/crictl.yaml", "etc/sysctl.d/99-bke.conf", "etc/kubernetes/kubelet.conf"):
        assert not (n1 / path).exists(), path
    assert sorted(m["name"] for m in await etcd_members(sdata.members[0].client_url, tls)) == ["master1", "master2", "node1"]
    await assert_reads_back(node1.client_url, tls, DATA_KEYS)
