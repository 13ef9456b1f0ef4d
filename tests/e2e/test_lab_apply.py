"""End to end: `bke lab apply` carries out a changed spec on a lab install (real NATS, Redis,
etcd; every service and agent a process; the CLI as a user runs it).

The seed example is installed once for the module; then four tests, run in this order, each
starting where the one before left the lab (1 and 2 are one test):
1. a dry run of a changed controller-manager flag changes nothing (no command, no file, the
   stored plan the same);
2. the apply, paused once the first master's command is sent: no further command is taken while
   paused, then after the resume it finishes: only kube-controller-manager.yaml changed, on each
   master, one master at a time (no two masters' ReplaceFiles overlap, from the agents' own
   execution records), and the worker got no command at all; the stored plan is the new one;
3. a label change applies the labels only (the node-labels record of that node; no command);
4. a new apiserver name (certSANs): each master's apiserver certificate re-issued and delivered
   with its kube-apiserver roll, one master at a time, nothing else changed;
5. on the same lab, two workers added and one removed by `bke lab apply`
   (membership_helpers.joins_and_a_removal: no other node commanded, a master refused).
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from redis import Redis

from bke.adapters.bus import EventWatch
from bke.adapters.bus.connect import connect_nats
from bke.contracts.upgrade import upgrade_subject
from bke.adapters.state.keys.plan import plan_meta_key
from bke.adapters.state.keys.dispatcher import node_labels_key
from bke_agent.journal import read_executions
from bke_agent.lablayout import LabLayout
from bke_agent.settings import LAB_STATE_SUBDIR

from .conftest import bus_violations, service_refusals
from .lab_helpers import Lab
from .test_lab_install import SEED, assert_ran_once
from .membership_helpers import joins_and_a_removal

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
KCM = "kube-controller-manager"
FLAG = '      certificates: {keyAlgorithm: ECDSA-P256}\n      controllerManager:\n        extraArgs: {kube-api-qps: "80"}\n'
QUIET_S = 7.0  # longer than the upgrader's idle re-check (operation.WAIT_S, 5 s): a pass would have run


def _bke(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *args], capture_output=True, text=True, timeout=timeout)


def _files(lab) -> dict[str, str]:
    """Every file BKE writes on every node (under etc/ and var/lib/kubelet), by digest."""
    out = {}
    for node in lab.plan.nodes:
        root = lab.host(node.hostname)
        for top in ("etc", "var/lib/kubelet"):
            for p in sorted((root / top).rglob("*")):
                if p.is_file():
                    out[str(p.relative_to(lab.workdir))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _dns_names(cert: Path) -> list[str]:
    from cryptography import x509
    sans = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    return sans.value.get_values_for_type(x509.DNSName)


def _records(lab):
    return {n.hostname: read_executions(lab.host(n.hostname) / LAB_STATE_SUBDIR) for n in lab.plan.nodes}


def _new_commands(lab, before: dict[str, int]):
    """Commands run since `before`, but the dispatcher's periodic health rounds (`<c>/health@<n>/...`:
    WaitHealth probes only, read-only, sent every 30 s to every node whatever else runs)."""
    return {h: [r for r in recs[before[h]:] if "/health@" not in r.commandId] for h, recs in _records(lab).items()}


@dataclass
class Applied:
    """The module's lab, and what each stage leaves for the next."""

    lab: Lab
    tmp: Path
    redis: Redis
    masters: list[str]
    workers: list[str]
    spec: Path  # the spec last applied
    files: dict[str, str] = field(default_factory=dict)  # every file BKE wrote, after the last stage
    stage: int = 0  # the last stage that finished

    def next_stage(self, n: int) -> None:
        assert self.stage == n - 1, f"stage {n} starts where stage {n - 1} ends, and that one did not finish"

    def counts(self) -> dict[str, int]:
        return {h: len(recs) for h, recs in _records(self.lab).items()}


@pytest.fixture(scope="module")
def applied(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("apply")
    spec = tmp / "seed.yaml"
    spec.write_text(Path(SEED).read_text().replace("127.0.10.", "127.0.98."))
    lab = Lab(tmp / "lab", spec)
    try:
        lab.start()
        assert asyncio.run(lab.install()) == 0, lab.out.getvalue()
        masters = [n.hostname for n in lab.plan.nodes if "master/node" in n.roles]
        r = Redis.from_url(lab.info.redis_url, decode_responses=True)
        yield Applied(lab, tmp, r, masters, [n.hostname for n in lab.plan.nodes if n.hostname not in masters], spec)
        r.close()
        refused, violations = service_refusals(lab), bus_violations(lab)
        assert not refused, f"Redis refused a service: {refused}"
        assert not violations, "nats-server refused a lab process:\n" + "\n".join(violations[:20])
    finally:
        lab.down()


async def test_a_dry_run_changes_nothing_then_a_flag_rolls_master_by_master_through_a_pause(applied: Applied):
    applied.next_stage(1)
    lab, r, masters, workers, tmp_path = applied.lab, applied.redis, applied.masters, applied.workers, applied.tmp
    cluster, text = lab.plan.cluster, applied.spec.read_text()
    digest0 = r.hget(plan_meta_key(cluster), "digest")
    files0 = _files(lab)
    counts0 = applied.counts()

    changed = tmp_path / "changed.yaml"
    assert "      certificates: {keyAlgorithm: ECDSA-P256}\n" in text
    changed.write_text(text.replace("      certificates: {keyAlgorithm: ECDSA-P256}\n", FLAG))

    # 1. a dry run: the actions are shown, nothing changes anywhere
    dry = await asyncio.to_thread(_bke, "lab", "apply", str(changed), "--workdir", str(lab.workdir), "--dry-run")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert re.search(rf"roll\s+{masters[0]}\s+{KCM}", dry.stdout), dry.stdout
    assert _files(lab) == files0
    assert all(not recs for recs in _new_commands(lab, counts0).values())
    assert r.hget(plan_meta_key(cluster), "digest") == digest0

    # 2. the apply, paused once the first master's command is out. The lab's pods come up in well
    # under a second, quicker than `bke pause` starts: master1's controller-manager is held
    # unhealthy (the lab's control file) until the pause is recorded, so its ReplaceFiles waits
    # on its probe (45 s in the lab) and then succeeds: deterministically one master done, paused.
    hold = LabLayout(lab.host(masters[0])).unhealthy_file(KCM)
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.write_text("held by the test until the pause is recorded\n")
    nc = await connect_nats(lab.access)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    async with EventWatch(nc, [upgrade_subject(cluster)]) as watch:
        proc = subprocess.Popen([sys.executable, "-m", "bke_cli.main", "lab", "apply", str(changed), "--workdir",
                                 str(lab.workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

        def sent_first() -> bool:
            for e in watch.seen:
                step = next((s for s in e.data["upgrade"]["steps"] if s["name"] == KCM), None)
                if step is not None and step["status"] == "Running":
                    return True
            return False

        deadline = time.monotonic() + 120
        while not sent_first():
            assert time.monotonic() < deadline and proc.poll() is None, (proc.poll(), [e.data for e in watch.seen])
            await watch.wait_more(len(watch.seen), timeout=1.0)
        paused = await asyncio.to_thread(_bke, "pause", cluster, "--workdir", str(lab.workdir), "--reason", "test")
        assert paused.returncode == 0, paused.stdout + paused.stderr
        hold.unlink()  # master1's new controller-manager answers healthy: its command ends, nothing follows
        # the command(s) already sent run to their end; then nothing new while paused
        deadline = time.monotonic() + 120
        while True:
            new = _new_commands(lab, counts0)
            done = sum(len(v) for v in new.values())
            if done >= 1:
                break
            assert time.monotonic() < deadline, "the first master's command never ran"
            await asyncio.sleep(0.2)  # polling the agents' records under a deadline
        held = sum(len(v) for v in _new_commands(lab, counts0).values())
        await asyncio.sleep(QUIET_S)  # an observation window: a step taken while paused would show here
        assert sum(len(v) for v in _new_commands(lab, counts0).values()) == held
        assert held == 1, _new_commands(lab, counts0)
        assert proc.poll() is None
        last = watch.seen[-1].data["upgrade"]
        assert last["status"] == "Running"

        resumed = await asyncio.to_thread(_bke, "resume", cluster, "--workdir", str(lab.workdir))
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        out, err = await asyncio.to_thread(proc.communicate, timeout=300)
    await nc.close()
    assert proc.returncode == 0, out + err
    assert "apply Succeeded" in out, out

    # only the controller-manager's manifest changed, on each master; the worker got nothing
    files1 = _files(lab)
    diff = sorted(k for k in files1.keys() | files0.keys() if files1.get(k) != files0.get(k))
    assert diff == sorted(f"hosts/{m}/etc/kubernetes/manifests/{KCM}.yaml" for m in masters), diff
    for m in masters:
        assert "--kube-api-qps=80" in lab.manifest(m, f"{KCM}.yaml")["spec"]["containers"][0]["command"]
    new = _new_commands(lab, counts0)
    assert all(not new[w] for w in workers), {w: new[w] for w in workers}
    assert all(len(new[m]) == 1 and f"@{KCM}/" in new[m][0].commandId for m in masters), new
    spans = sorted((new[m][0].startedAt, new[m][0].finishedAt, m) for m in masters)
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        assert end <= start, f"{a}'s and {b}'s ReplaceFiles overlap: {spans}"
    assert [s[2] for s in spans] == masters  # in the plan's order
    assert r.hget(plan_meta_key(cluster), "digest") != digest0
    assert_ran_once(lab)
    applied.spec, applied.files, applied.stage = changed, files1, 1


async def test_a_label_change_sets_the_labels_and_commands_no_node(applied: Applied):
    applied.next_stage(2)
    lab, r, workers, files1 = applied.lab, applied.redis, applied.workers, applied.files
    cluster, changed = lab.plan.cluster, applied.spec
    labels0 = r.hgetall(node_labels_key(cluster))
    counts1 = applied.counts()
    relabel = applied.tmp / "relabel.yaml"
    relabel.write_text(changed.read_text().replace("role: [node]}", "role: [node], labels: {tier: gold}}"))
    assert relabel.read_text() != changed.read_text()
    done = await asyncio.to_thread(_bke, "lab", "apply", str(relabel), "--workdir", str(lab.workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "set-labels-taints" in done.stdout
    labels1 = r.hgetall(node_labels_key(cluster))
    assert {h for h in labels1 if labels1[h] != labels0.get(h)} == set(workers)
    assert json.loads(labels1[workers[0]])["labels"]["tier"] == "gold"
    assert all(not recs for recs in _new_commands(lab, counts1).values())
    assert _files(lab) == files1
    applied.spec, applied.stage = relabel, 2


async def test_a_new_apiserver_name_reissues_each_masters_certificate_with_its_roll(applied: Applied):
    """`apiServer.certSANs`: the certs service re-issues each master's apiserver certificate, which
    rides with that master's kube-apiserver roll (its manifest carries its certificates' names, so
    the pod restarts): one master at a time."""
    applied.next_stage(3)
    lab, masters, workers, files1, relabel = applied.lab, applied.masters, applied.workers, applied.files, applied.spec
    counts2 = applied.counts()
    renamed = applied.tmp / "renamed.yaml"
    renamed.write_text(relabel.read_text().replace(
        "      certificates: {keyAlgorithm: ECDSA-P256}\n",
        "      certificates: {keyAlgorithm: ECDSA-P256}\n      apiServer: {certSANs: [api.seed.example.com]}\n"))
    done = await asyncio.to_thread(_bke, "lab", "apply", str(renamed), "--workdir", str(lab.workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "reissue-certificates" in done.stdout and "apply Succeeded" in done.stdout, done.stdout
    files2 = _files(lab)
    diff = sorted(k for k in files2.keys() | files1.keys() if files2.get(k) != files1.get(k))
    assert diff == sorted(f"hosts/{m}/etc/kubernetes/{f}" for m in masters
                          for f in ("manifests/kube-apiserver.yaml", "pki/apiserver.crt", "pki/apiserver.key")), diff
    for m in masters:
        assert "api.seed.example.com" in _dns_names(lab.host(m) / "etc/kubernetes/pki/apiserver.crt"), m
    new = _new_commands(lab, counts2)
    assert all(not new[w] for w in workers), {w: new[w] for w in workers}
    assert all(len(new[m]) == 1 and "@kube-apiserver/" in new[m][0].commandId for m in masters), new
    spans = sorted((new[m][0].startedAt, new[m][0].finishedAt, m) for m in masters)
    assert all(end <= start for (_, end, _a), (start, _, _b) in zip(spans, spans[1:])), spans
    assert_ran_once(lab)
    applied.spec, applied.files, applied.stage = renamed, files2, 3


async def test_workers_and_a_master_join_then_leave_by_apply(applied: Applied):
    applied.next_stage(4)
    await joins_and_a_removal(applied.lab, applied.spec.read_bytes(), "127.0.98")
    applied.stage = 4
