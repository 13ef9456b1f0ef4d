"""ReplaceFiles against the lab's kubelet stand-in: an apiserver manifest replaced by a new
version comes up healthy (Succeeded); with the new version broken on purpose
(`write_fault`, faults.json) the step fails, says it rolled back, the old manifest is back
and its pod answers healthy again. A REAL etcd whose new version refuses to start
(`write_refusal`) is rolled back as soon as it has exited three times, long before the step's
timeout, with etcd's own error line in the reason."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bke.contracts.agent import AgentCommand, StepResult
from bke.contracts.agent_steps import HealthProbe, NewFile, ReplaceFiles
from bke_agent import AgentIdentity, Executor, LabBackend, LabLayout
from bke_agent.lablayout import REFUSED_ARG, write_fault, write_refusal
from bke_agent.kubelet.pods import ETCD_BINARIES_ENV, local_binary

from .agent_helpers import (PROBE_TLS, apiserver_manifest, etcd_manifest, free_node_ip, issue_pki, stop_leftover_pods,
                            write_manifest)

pytestmark = pytest.mark.integration
MANIFEST = "/etc/kubernetes/manifests/kube-apiserver.yaml"


async def poll(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)
    return value


async def livez(url: str) -> int | None:
    try:
        async with httpx.AsyncClient(verify=False, trust_env=False, timeout=2.0) as c:
            return (await c.get(url)).status_code
    except httpx.HTTPError:
        return None


def version(ip: str, port: int, tag: str) -> bytes:
    doc = apiserver_manifest(ip, port)
    doc["spec"]["containers"][0]["image"] = f"registry.k8s.io/kube-apiserver:{tag}"
    return yaml.safe_dump(doc).encode()


def replace(step_id: str, data: bytes, port: int, timeout_s: float) -> ReplaceFiles:
    return ReplaceFiles(id=step_id, timeout_s=timeout_s, rollback_timeout_s=30,
                        files=[NewFile(path=MANIFEST, mode=0o600, content_b64=base64.b64encode(data).decode(),
                                       sha256=hashlib.sha256(data).hexdigest())],
                        probes=[HealthProbe(url=f"https://127.0.0.1:{port}/livez", tls=PROBE_TLS)])


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Path, str, int]]:
    root = tmp_path / "hosts" / "m1"
    root.mkdir(parents=True)
    ip, (port, *_) = free_node_ip(1)
    try:
        yield root, ip, port
    finally:
        stop_leftover_pods(root)


async def test_upgrade_succeeds_then_a_broken_version_is_rolled_back(node: tuple[Path, str, int]) -> None:
    root, ip, port = node
    layout = LabLayout(root)
    issue_pki(root, ip)
    url = f"https://{ip}:{port}/livez"
    backend = LabBackend(root, ip, kubelet_poll_s=0.05)
    executor = Executor(backend, AgentIdentity.ephemeral())
    await backend.kubelet.start()

    async def run(step: ReplaceFiles) -> StepResult:
        cmd = AgentCommand(command_id=f"c1/upgrade/m1/{step.id}", cluster="c1", node="m1", phase="upgrade",
                           issued_at="t", steps=[step])
        [res] = (await executor.run(cmd)).steps
        return res

    def pod(sha: bytes, ready: bool) -> Callable[[], bool]:
        def probe() -> bool:
            st = layout.pod_status("kube-apiserver") or {}
            return st.get("manifestSha256") == hashlib.sha256(sha).hexdigest() and st.get("ready") is ready
        return probe

    try:
        old = version(ip, port, "v1.35.0")
        write_manifest(root, "kube-apiserver.yaml", yaml.safe_load(old))
        await poll(lambda: (st := layout.pod_status("kube-apiserver")) and st["ready"], 20, "the v1.35.0 pod")

        new = version(ip, port, "v1.36.1")
        res = await run(replace("replace:apiserver-1", new, port, timeout_s=20))
        assert res.status == "Succeeded", res.stderr
        assert (root / MANIFEST.lstrip("/")).read_bytes() == new
        assert pod(new, True)() and await livez(url) == 200

        write_fault(root, "kube-apiserver", "v1.36.2")  # only this version is broken
        broken = version(ip, port, "v1.36.2")
        res = await run(replace("replace:apiserver-2", broken, port, timeout_s=3))
        assert res.status == "Failed"
        # the probe's status and latency, never what the endpoint said (bke.core.host_actions.endpoints)
        assert re.match(rf"rolled back {MANIFEST}: not healthy within 3s \(https://127.0.0.1:{port}/livez: "
                        r"HTTP 500 in \d+ ms\)", res.stderr), res.stderr
        assert "broken on purpose" not in res.stderr
        assert res.stderr.endswith("the previous files are back and healthy"), res.stderr
        assert (root / MANIFEST.lstrip("/")).read_bytes() == new  # v1.36.1 is back
        assert pod(new, True)() and await livez(url) == 200
        backup = root / "var/lib/bke-agent/replace-backups/c1%2Fupgrade%2Fm1%2Freplace%3Aapiserver-2"
        assert (backup / "replace%3Aapiserver-2/files/0").read_bytes() == new
    finally:
        await backend.stop()


async def test_a_real_etcd_that_refuses_to_start_is_rolled_back_early_with_its_own_error_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """etcd 3.5.1-0 runs; its "3.5.99-0" (the same binary, BKE_LAB_ETCD_BINARIES) is given an
    argument etcd refuses (faults.json `refuses`): three exits in a few seconds, then the old
    manifest is back and the member healthy again, where the step had 60 s."""
    root = tmp_path / "hosts" / "m1"
    root.mkdir(parents=True)
    ip, (client, peer, metrics) = free_node_ip(3)
    etcd = local_binary("etcd", "registry.k8s.io/etcd:3.5.1-0")
    assert etcd is not None
    monkeypatch.setenv(ETCD_BINARIES_ENV, json.dumps({"3.5.99": str(etcd)}))
    issue_pki(root, ip)
    layout = LabLayout(root)
    backend = LabBackend(root, ip, kubelet_poll_s=0.05)
    await backend.kubelet.start()
    try:
        old = etcd_manifest(ip, client, peer, metrics)
        old["spec"]["containers"][0]["image"] = "registry.k8s.io/etcd:3.5.1-0"
        write_manifest(root, "etcd.yaml", old)
        await poll(lambda: (st := layout.pod_status("etcd")) and st["ready"], 30, "etcd 3.5.1 ready")
        write_refusal(root, "etcd", "3.5.99-0")
        new = json.loads(json.dumps(old))
        new["spec"]["containers"][0]["image"] = "registry.k8s.io/etcd:3.5.99-0"
        data = yaml.safe_dump(new).encode()
        step = ReplaceFiles(id="replace:etcd", timeout_s=60, rollback_timeout_s=30,
                            files=[NewFile(path="/etc/kubernetes/manifests/etcd.yaml", mode=0o600,
                                           content_b64=base64.b64encode(data).decode(),
                                           sha256=hashlib.sha256(data).hexdigest())],
                            probes=[HealthProbe(url=f"http://127.0.0.1:{metrics}/health")])
        cmd = AgentCommand(command_id="c1/upgrade/m1/etcd", cluster="c1", node="m1", phase="upgrade",
                           issued_at="t", steps=[step])
        t0 = time.monotonic()
        [res] = (await Executor(backend, AgentIdentity.ephemeral()).run(cmd)).steps
        took = time.monotonic() - t0
        assert res.status == "Failed" and took < 30, (took, res.stderr)
        assert res.stderr.startswith("rolled back /etc/kubernetes/manifests/etcd.yaml: etcd exited 3 times since "
                                     "its new manifest was written; its last error: flag provided but not defined: "
                                     f"-{REFUSED_ARG.lstrip('-')}"), res.stderr
        assert res.stderr.endswith("the previous files are back and healthy"), res.stderr
        assert "3.5.1-0" in (root / "etc/kubernetes/manifests/etcd.yaml").read_text()
        st = await poll(lambda: (s := layout.pod_status("etcd")) and s["ready"] and s, 10, "etcd 3.5.1 ready again")
        argv = Path(f"/proc/{st['pid']}/cmdline").read_bytes().split(b"\0")
        assert REFUSED_ARG.encode() not in argv  # the old version runs as rendered
    finally:
        await backend.stop()
