"""End to end: the control plane scaled out with stacked masters through `bke lab apply`: a new
master joins the right etcd cluster first as a learner, is promoted once it has caught up, the
cluster's health is checked after, and the apiserver flags that list members are re-rendered
and rolled one node at a time. Real NATS, Redis and etcd; every service and
agent its own process.

The seed example (three masters, each an etcd-data member; one worker) is installed; the spec
with master4 and master5, both `[master/node, etcd]`, is applied: each is added to etcd-data as a
learner on master1, joined by the dispatcher (etcd started `existing`, then its control plane),
promoted, every member's health waited for; then the existing members' manifests and the three
apiservers (`--etcd-servers` naming five members) rolled one node at a time. etcd-data lists five
voting members, the new apiservers run, the worker received no command."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bke.core.plan import plan_spec_text
from bke.adapters.runtime import mtls_context
from bke_agent.journal import read_executions
from bke_agent.settings import LAB_STATE_SUBDIR

from .lab_helpers import Lab
from .test_lab_install import SEED

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]
NET = "127.0.26"


def _node(host: str, last: int) -> str:
    return (f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: seed-{host}}}\n"
            f"spec: {{hostname: {host}, ip: {NET}.{last}, role: [master/node, etcd]}}\n")


def _bke(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *args], capture_output=True, text=True, timeout=timeout)


async def test_two_stacked_masters_join_etcd_as_learners_then_the_apiservers_roll(lab_factory, tmp_path: Path):
    text = Path(SEED).read_text().replace("127.0.10.", f"{NET}.")
    (tmp_path / "seed.yaml").write_text(text)
    lab: Lab = lab_factory(str(tmp_path / "seed.yaml"))
    assert await lab.install() == 0, lab.out.getvalue()
    worker_before = len(read_executions(lab.host("node1") / LAB_STATE_SUBDIR))

    bigger = text.rstrip("\n") + "\n" + _node("master4", 9) + _node("master5", 10)
    (tmp_path / "bigger.yaml").write_text(bigger)
    done = await asyncio.to_thread(_bke, "lab", "apply", str(tmp_path / "bigger.yaml"), "--workdir", str(lab.workdir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "apply Succeeded" in done.stdout, done.stdout

    plan = plan_spec_text(bigger).plan
    assert plan is not None
    ec = plan.etcd_cluster("etcd-data")
    assert ec is not None and len(ec.members) == 5
    pki = lab.host("master1") / "etc/kubernetes/pki"
    tls = (pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    async with httpx.AsyncClient(verify=mtls_context(*(str(p) for p in tls)), trust_env=False, timeout=5.0) as http:
        r = await http.post(f"{ec.members[0].client_url}/v3/cluster/member/list", json={"linearizable": True})
        members = r.json()["members"]
    assert sorted(m["name"] for m in members) == ["master1", "master2", "master3", "master4", "master5"]
    assert not any(m.get("isLearner") for m in members)
    for host in ("master1", "master4"):
        command = lab.manifest(host, "kube-apiserver.yaml")["spec"]["containers"][0]["command"]
        servers = next(a for a in command if a.startswith("--etcd-servers="))
        assert all(m.client_url in servers for m in ec.members), (host, servers)
    for host in ("master4", "master5"):
        for component in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            assert (lab.host(host) / f"etc/kubernetes/manifests/{component}.yaml").is_file(), (host, component)
    worker = [r.commandId for r in read_executions(lab.host("node1") / LAB_STATE_SUBDIR)[worker_before:]
              if "/health@" not in r.commandId]
    assert worker == [], worker  # the worker: nothing but the periodic health checks
