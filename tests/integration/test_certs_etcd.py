"""Real etcd clusters with the certificates BKE issues: etcd-data and etcd-events, 3 members each.

Client and peer TLS are on (client-cert-auth on both). The apiserver's single etcd client
certificate writes and reads in both clusters; a certificate of the Kubernetes CA is refused; an
etcd-events member that tries to join etcd-data with its etcd-events peer certificate is
rejected by the data members' peer CA, while a real etcd-data member joins the same way (the
control that proves the procedure itself works). Every wait is a poll under a deadline.
"""
from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
import yaml

from bke.adapters.pki.store_dir import DirStore
from bke.core.pki import IssueOptions, ensure_cluster_pki
from bke.core.plan import Plan, plan_spec_text
from bke.adapters.runtime import (
    EtcdRequestError,
    ManagedProcess,
    etcd_put_get,
    free_port,
    mtls_context,
    poll_until,
    start_etcd,
    wait_etcd_healthy,
)
from bke.core.secrets import SecretBox

pytestmark = pytest.mark.integration

NET = "127.0.30"
SPEC = f"""
apiVersion: bke.bocloud.com/v1beta1
kind: BKECluster
metadata: {{name: etcdlab}}
spec:
  controlPlaneEndpoint: {{host: {NET}.1, port: 6443}}
  clusterConfig:
    cluster:
      kubernetesVersion: v1.33.2
      etcdVersion: v3.5.1
      containerdVersion: v2.1.1
      certificates: {{keyAlgorithm: ECDSA-P256}}
"""
# etcd-data has 5 planned members (quorum rules need an odd count); 3 start, e4 joins later.
NODES = [("m1", 1, ["master"])] + [(f"e{i}", 10 + i, ["etcd"]) for i in (1, 2, 3, 4, 5)] \
    + [(f"v{i}", 20 + i, ["etcd-event"]) for i in (1, 2, 3)]


def _spec_text() -> str:
    docs = [{"apiVersion": "bke.bocloud.com/v1beta1", "kind": "BKENode", "metadata": {"name": h},
             "spec": {"hostname": h, "ip": f"{NET}.{ip}", "role": roles}} for h, ip, roles in NODES]
    return SPEC + "".join("---\n" + yaml.safe_dump(d) for d in docs)


@dataclass
class Member:
    name: str
    ip: str
    cluster: str
    client: str
    peer: str
    metrics: str
    certs: Path  # the node's etcd folder inside the issued tree


@dataclass
class Lab:
    plan: Plan
    pki: Path
    work: Path
    procs: list[ManagedProcess]

    def node_file(self, host: str, path: str) -> Path:
        return self.pki / host / path.lstrip("/")

    @property
    def client(self) -> tuple[Path, Path, Path]:
        """What kube-apiserver on m1 uses for every etcd cluster: --etcd-cafile/-certfile/-keyfile."""
        return (self.node_file("m1", "/etc/kubernetes/pki/etcd/ca.crt"),
                self.node_file("m1", "/etc/kubernetes/pki/apiserver-etcd-client.crt"),
                self.node_file("m1", "/etc/kubernetes/pki/apiserver-etcd-client.key"))

    def member(self, cluster: str, host: str) -> Member:
        """Member URLs on the plan's IPs; ports are free ones (the certificates name IPs only)."""
        c = self.plan.etcd_cluster(cluster)
        ip = c.member(host).ip
        ports = [free_port(ip) for _ in range(3)]
        return Member(host, ip, cluster, f"https://{ip}:{ports[0]}", f"https://{ip}:{ports[1]}",
                      f"http://{ip}:{ports[2]}", self.node_file(host, c.cert_dir))

    def start(self, m: Member, initial: list[Member], state: str, certs: Path | None = None,
              peer_ca: Path | None = None) -> ManagedProcess:
        d = certs or m.certs
        proc = start_etcd([
            "--name", m.name, "--data-dir", str(self.work / f"{m.cluster}-{m.name}"),
            "--listen-client-urls", m.client, "--advertise-client-urls", m.client,
            "--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
            "--listen-metrics-urls", m.metrics,
            "--initial-cluster", ",".join(f"{x.name}={x.peer}" for x in initial),
            "--initial-cluster-state", state, "--initial-cluster-token", m.cluster,
            "--cert-file", str(d / "server.crt"), "--key-file", str(d / "server.key"),
            "--trusted-ca-file", str(d / "ca.crt"), "--client-cert-auth",
            "--peer-cert-file", str(d / "peer.crt"), "--peer-key-file", str(d / "peer.key"),
            "--peer-trusted-ca-file", str(peer_ca or d / "peer-ca.crt"), "--peer-client-cert-auth",
            "--log-level", "info", "--logger", "zap",
        ], self.work / f"{m.cluster}-{m.name}.log")
        self.procs.append(proc)
        return proc


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    outcome = plan_spec_text(_spec_text())
    assert outcome.plan is not None, outcome.errors
    # etcd checks validity against the real clock: "now" is injected from it here.
    now = datetime.now(timezone.utc)
    asyncio.run(ensure_cluster_pki(outcome.plan, DirStore(tmp_path / "pki"), now, SecretBox(os.urandom(32)),
                                   IssueOptions(procs=1)))
    lab = Lab(outcome.plan, tmp_path / "pki", tmp_path / "work", [])
    try:
        yield lab
    finally:
        for proc in lab.procs:
            proc.stop()


def _gateway(lab: Lab, url: str, path: str, body: dict) -> dict:
    ca, cert, key = lab.client
    with httpx.Client(verify=mtls_context(ca, cert, key), trust_env=False, timeout=5) as client:
        resp = client.post(f"{url}{path}", json=body)
        if resp.status_code != 200:
            raise EtcdRequestError(f"{url}{path}: HTTP {resp.status_code} {resp.text}")
        return resp.json()


def _add_learner(lab: Lab, url: str, peer: str) -> None:
    """etcd refuses reconfiguration until its leader has been connected to every voter for 5 s
    ("unhealthy cluster"): retry under a deadline."""
    poll_until(lambda: _gateway(lab, url, "/v3/cluster/member/add", {"peerURLs": [peer], "isLearner": True}),
               timeout=30, what=f"member add {peer}", interval=0.25)


def _members(lab: Lab, url: str) -> dict[str, str]:
    """peer URL -> member name ("" while a member has not started)."""
    body = _gateway(lab, url, "/v3/cluster/member/list", {})
    return {m["peerURLs"][0]: m.get("name", "") for m in body["members"]}


def test_two_etcd_clusters_shared_client_ca_separate_peer_cas(lab: Lab) -> None:
    data = [lab.member("etcd-data", f"e{i}") for i in (1, 2, 3)]
    events = [lab.member("etcd-events", f"v{i}") for i in (1, 2, 3)]
    procs = {m.name: lab.start(m, data, "new") for m in data} | {m.name: lab.start(m, events, "new") for m in events}
    ca, cert, key = lab.client
    for m in data + events:  # client + peer TLS clusters formed, and each member accepts the apiserver's cert
        wait_etcd_healthy(m.client, ca, cert, key, timeout=60, process=procs[m.name])
    for m in data + events:
        assert etcd_put_get(m.client, ca, cert, key, f"/registry/{m.cluster}/{m.name}", m.name) == m.name

    kube_client = (lab.node_file("m1", "/etc/kubernetes/pki/apiserver-kubelet-client.crt"),
                   lab.node_file("m1", "/etc/kubernetes/pki/apiserver-kubelet-client.key"))
    with pytest.raises(EtcdRequestError):  # a Kubernetes-CA client certificate is no etcd client
        etcd_put_get(data[0].client, ca, *kube_client, "/registry/x", "y")

    # An etcd-events member (v1, its own IP and certificates) asks to join etcd-data.
    intruder = lab.member("etcd-events", "v1")
    intruder = Member("v1", intruder.ip, "etcd-data", intruder.client, intruder.peer, intruder.metrics, intruder.certs)
    _add_learner(lab, data[0].client, intruder.peer)
    logs = {m.name: lab.work / f"etcd-data-{m.name}.log" for m in data}
    offsets = {name: path.stat().st_size for name, path in logs.items()}
    # It even trusts etcd-data's peer CA itself: only the data members' own check can stop it.
    proc = lab.start(intruder, data + [intruder], "existing",
                     peer_ca=lab.node_file("e1", "/etc/kubernetes/pki/etcd/peer-ca.crt"))

    def refused() -> bool | None:
        """The data members refused its certificate, and it gave up (etcd exits when it cannot
        fetch the cluster from any peer)."""
        new = "".join(path.read_bytes()[offsets[name]:].decode() for name, path in logs.items())
        seen = any("rejected connection" in line and "signed by unknown authority" in line for line in new.splitlines())
        return True if seen and not proc.alive() else None

    poll_until(refused, timeout=30, what="etcd-data members refusing the etcd-events peer certificate")
    assert "remote error: tls: bad certificate" in proc.log_path.read_text()
    assert _members(lab, data[1].client)[intruder.peer] == ""  # added, never started: not a member
    for m in data:
        wait_etcd_healthy(m.client, ca, cert, key, timeout=10, process=procs[m.name])

    # Control: a real etcd-data member (e4, etcd-data peer certificate) joins the same way.
    _gateway(lab, data[0].client, "/v3/cluster/member/remove",
             {"ID": next(m["ID"] for m in _gateway(lab, data[0].client, "/v3/cluster/member/list", {})["members"]
                         if m["peerURLs"][0] == intruder.peer)})
    e4 = lab.member("etcd-data", "e4")
    _add_learner(lab, data[0].client, e4.peer)
    p4 = lab.start(e4, data + [e4], "existing")
    poll_until(lambda: True if _members(lab, data[0].client).get(e4.peer) == "e4" else None,
               timeout=30, what="e4 started as a learner of etcd-data")
    wait_etcd_healthy(e4.client, ca, cert, key, timeout=30, process=p4)
    value = _gateway(lab, e4.client, "/v3/kv/range", {"key": base64.b64encode(b"/registry/etcd-data/e2").decode(),
                                                      "serializable": True})
    assert base64.b64decode(value["kvs"][0]["value"]) == b"e2"  # replicated to the new member
