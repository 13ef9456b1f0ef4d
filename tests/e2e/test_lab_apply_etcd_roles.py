"""End to end: nodes that join, move between and leave etcd clusters in place, and a worker that
stops registering, by `bke lab apply` (changed roles re-render and roll only the
affected nodes). Real NATS, Redis and etcd 3.5.1 members run by the kubelet stand-ins; every
service and agent its own process.

A split cluster (m1 the master, etcd1 the etcd-data member, events1 the one etcd-events member,
w1 a worker) is installed and data is written into both etcd clusters. Then:
1. m1 and etcd1 also become etcd-events members: each is added as a learner, joined again by
   the dispatcher with its new roles (`JoinNodes.rejoin`: only its start in etcd-events,
   `--initial-cluster-state=existing`; what it runs already is left alone: etcd1's etcd-data
   member keeps running and keeps its data), promoted, and the cluster's health waited for.
   etcd-events lists three voting members, each serving the data written before; the
   apiserver's overrides name the three;
2. events1 moves out of etcd-events to become a worker while w1, the worker, becomes a member:
   w1 joins (its kubelet kept), then events1 is removed from etcd-events, its member taken away
   on its node (its pod, then its data directory: `LeaveEtcdMember`; its etcd-events keys), and
   it joins again as a worker (its kubelet now registers) with only what it keeps named as
   running;
3. m1 and etcd1 leave etcd-events in place: each removed from the cluster, the apiserver rolled
   without them, then their members and etcd-events keys taken away. Nobody is ever reset:
   etcd1's etcd-data member and m1's control plane serve throughout, with their data.
And on the seed (three stacked masters, one worker):
1. node1, the worker, becomes etcd-only in one apply ([node] -> [etcd]) while master3 stops
   being an etcd-data member: node1 cordoned and drained first, added as a learner, joined again
   (`rejoin.running`: containerd and the kubelet), promoted; master3 removed; the members that
   stay and every apiserver rolled; node1's runtime rolled to its standalone kubelet (never
   uncordoned), master3's member taken away on its node (its control plane keeps running),
   node1's registering files taken away and its kubelet restarted, then its Node object
   deleted (the lab records each API action); node1's member serves the data;
2. master3 becomes a worker that is an etcd-data member again ("moves": it joins etcd-data as a
   learner, its old member's data gone since step 1, then its control plane and master-only
   files are taken away) while master2 leaves etcd-data in place."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bke.core.plan import plan_spec_text
from bke.core.plan.models import EtcdClusterPlan
from bke.core.render.context import RenderInputs
from bke.core.render.render import render_cluster
from bke.adapters.runtime import etcd_put_get

from .lab_helpers import Lab, assert_reads_back, etcd_members
from tests.unit.upgrade_helpers import events_spec

# two labs of their own: an install and two or three role changes each, about 45 s each here
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
NET = "127.0.28"
KEYS = {f"/registry/events/default/roles-{i}": f"before-the-changes-{i}" for i in range(5)}
DATA_KEYS = {f"/registry/pods/default/roles-{i}": f"etcd-data-{i}" for i in range(3)}


def _bke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *args], capture_output=True, text=True, timeout=timeout)


def _overrides(lab: Lab) -> str:
    command = lab.manifest("m1", "kube-apiserver.yaml")["spec"]["containers"][0]["command"]
    return next(a for a in command if a.startswith("--etcd-servers-overrides="))


def _split(**roles: str) -> str:
    text = events_spec("roles", NET, ("events1",)) + (
        "---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {name: roles-w1}\n"
        f"spec: {{hostname: w1, ip: {NET}.41, role: [node]}}\n")
    for host, role in roles.items():
        line = next(x for x in text.splitlines() if f"hostname: {host}," in x)
        text = text.replace(line, line[:line.index("role: [")] + f"role: [{role}]}}")
    return text


async def _apply(lab: Lab, tmp_path: Path, name: str, text: str) -> str:
    """`bke lab apply` of `text`, once the dispatcher's latest health round finds every etcd
    member healthy: the quorum rule counts the members that round found unhealthy, and a round
    taken while the previous apply started a member (every 30 s in the lab) saw it starting."""
    (tmp_path / f"{name}.yaml").write_text(text)
    args = ("lab", "apply", str(tmp_path / f"{name}.yaml"), "--workdir", str(lab.workdir))
    deadline = time.monotonic() + 120
    while True:
        dry = await asyncio.to_thread(_bke, *args, "--dry-run")
        if not re.search(r"unhealthy members (?!none)", dry.stdout + dry.stderr):
            break
        assert time.monotonic() < deadline, dry.stdout + dry.stderr
        await asyncio.sleep(3)  # polling the dry run under a deadline: the next health round
    done = await asyncio.to_thread(_bke, *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "apply Succeeded" in done.stdout and "agent stopped" not in done.stdout, done.stdout  # nobody removed
    return done.stdout


async def _serving(text: str, cluster: str, tls: tuple[Path, Path, Path], keys: dict[str, str]) -> EtcdClusterPlan:
    """`cluster` of `text`'s plan runs exactly its members, every one voting and serving `keys`."""
    plan = plan_spec_text(text).plan
    assert plan is not None
    got = plan.etcd_cluster(cluster)
    assert got is not None
    listed = await etcd_members(got.members[0].client_url, tls)
    assert sorted(m["name"] for m in listed) == sorted(m.hostname for m in got.members)
    assert not any(m.get("isLearner") for m in listed)
    for m in got.members:
        await assert_reads_back(m.client_url, tls, keys)
    return got


def _left_alone(lab: Lab, host: str, ec: EtcdClusterPlan) -> None:
    """`host`'s member of `ec` is gone from the node: its manifest, data and keys."""
    root = lab.host(host)
    assert not (root / ec.data_dir.lstrip("/")).exists(), host
    assert not (root / "etc/kubernetes/manifests" / ec.manifest).exists(), host
    left = sorted(p.name for p in (root / ec.cert_dir.lstrip("/")).glob("*") if p.name != "ca.crt")
    assert left == [], (host, left)


async def test_members_join_move_between_and_leave_etcd_clusters_in_place(lab_factory, tmp_path: Path):
    first = _split()
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

    async def events_members(text: str) -> EtcdClusterPlan:
        got = await _serving(text, "etcd-events", tls, KEYS)
        overrides = _overrides(lab)
        assert all(m.client_url in overrides for m in got.members), overrides
        assert not any(m.client_url in overrides for m in ec.members if got.member(m.hostname) is None), overrides
        return got

    # 1. m1 (the master) and etcd1 (etcd-data's member) become etcd-events members too
    joined = _split(m1="master/node, etcd-event", etcd1="etcd, etcd-event")
    out = await _apply(lab, tmp_path, "joined", joined)
    assert "etcd-member-add" in out, out
    jec = await events_members(joined)
    assert sorted(m.hostname for m in jec.members) == ["etcd1", "events1", "m1"]
    # etcd1's etcd-data member was left as it ran: one member, its data there
    assert [m["name"] for m in await etcd_members(data.members[0].client_url, tls)] == ["etcd1"]
    await assert_reads_back(data.members[0].client_url, tls, DATA_KEYS)

    # 2. events1 moves out to be a worker, w1 (a worker) becomes a member
    moved = _split(m1="master/node, etcd-event", etcd1="etcd, etcd-event", events1="node", w1="node, etcd-event")
    out = await _apply(lab, tmp_path, "moved", moved)
    assert "etcd-member-remove" in out and "cleanup" in out, out
    mec = await events_members(moved)
    assert sorted(m.hostname for m in mec.members) == ["etcd1", "m1", "w1"]
    _left_alone(lab, "events1", ec)
    for f in ("etc/kubernetes/kubelet.conf", "etc/crictl.yaml"):  # it registers now: a worker's files
        assert (lab.host("events1") / f).is_file(), f

    # 3. m1 and etcd1 leave etcd-events in place
    left = _split(events1="node", w1="node, etcd-event")
    out = await _apply(lab, tmp_path, "left", left)
    assert "etcd-member-remove" in out and "cleanup" in out, out
    lec = await events_members(left)
    assert [m.hostname for m in lec.members] == ["w1"]
    for h in ("m1", "etcd1"):
        _left_alone(lab, h, ec)
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


async def test_a_worker_becomes_etcd_only_a_stacked_master_leaves_etcd_then_rejoins_it_as_a_worker(lab_factory, tmp_path: Path):
    (tmp_path / "seed.yaml").write_text(_seed())
    lab: Lab = lab_factory(str(tmp_path / "seed.yaml"))
    assert await lab.install(timeout=480.0) == 0, lab.out.getvalue()
    data = lab.plan.etcd_cluster("etcd-data")
    assert data is not None and [m.hostname for m in data.members] == ["master1", "master2", "master3"]
    pki = lab.host("master1") / "etc/kubernetes/pki"
    tls = (pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    for k, v in DATA_KEYS.items():
        assert await asyncio.to_thread(etcd_put_get, data.members[0].client_url, *tls, k, v) == v

    # 1. node1, a worker, becomes etcd-only in one apply (drained, joined as a learner, promoted,
    # rolled standalone, its Node deleted) while master3 leaves etcd-data in place
    only = _seed(master3="master/node", node1="etcd")
    out = await _apply(lab, tmp_path, "only", only)
    assert "drain-nodes" in out and "etcd-member-remove" in out and "delete-node-objects" in out, out
    sdata = await _serving(only, "etcd-data", tls, DATA_KEYS)
    assert sorted(m.hostname for m in sdata.members) == ["master1", "master2", "node1"]
    node1 = sdata.member("node1")
    assert node1 is not None
    m3 = lab.host("master3")
    assert not (m3 / data.data_dir.lstrip("/")).exists() and not (m3 / "etc/kubernetes/manifests" / data.manifest).exists()
    assert sorted(p.name for p in (m3 / data.cert_dir.lstrip("/")).glob("*")) == ["ca.crt"]  # its apiserver's CA
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert (m3 / f"etc/kubernetes/manifests/{component}.yaml").is_file(), component
    command = lab.manifest("master3", "kube-apiserver.yaml")["spec"]["containers"][0]["command"]
    servers = next(a for a in command if a.startswith("--etcd-servers="))
    gone = data.member("master3")
    assert gone is not None and node1.client_url in servers and gone.client_url not in servers, servers
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

    # 2. master3 stops being a master and joins etcd-data again (its old member's data went in
    # step 1, so it starts clean as a learner), while master2 leaves etcd-data
    back = _seed(master2="master/node", master3="node, etcd", node1="etcd")
    assert "etcd-member-add" in await _apply(lab, tmp_path, "back", back)
    bdata = await _serving(back, "etcd-data", tls, DATA_KEYS)
    assert sorted(m.hostname for m in bdata.members) == ["master1", "master3", "node1"]
    _left_alone(lab, "master2", data)
    for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        assert not (m3 / f"etc/kubernetes/manifests/{component}.yaml").exists(), component
    for f in ("etc/kubernetes/admin.conf", "etc/kubernetes/pki/apiserver.key", "etc/kubernetes/pki/ca.key"):
        assert not (m3 / f).exists(), f
    assert (m3 / "etc/kubernetes/kubelet.conf").is_file()
    for h in ("master1", "master2"):
        command = lab.manifest(h, "kube-apiserver.yaml")["spec"]["containers"][0]["command"]
        servers = next(a for a in command if a.startswith("--etcd-servers="))
        assert all(m.client_url in servers for m in bdata.members), (h, servers)
