"""The lab's kubelet stand-in: a simulated pod (its files checked, its health served, made
unhealthy on purpose, restarted on change, stopped on removal) and a REAL etcd static pod
(healthy over its mapped listeners, reachable with mTLS, stopped on removal and with the agent,
and a leftover process of a killed agent stopped by the next one)."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import FetchFile, RemoveFile, Step, SystemdUnit, WaitHealth, WriteFile
from bke.lab.standins.binary_placeholder import lab_binary_sha256
from bke.adapters.runtime import etcd_put_get, pid_alive
from bke_agent import AgentIdentity, Executor, KubeletStandIn, LabBackend, LabLayout

from .agent_helpers import PKI, PROBE_TLS, apiserver_manifest, etcd_manifest, free_node_ip, issue_pki, stop_leftover_pods, write_manifest

pytestmark = pytest.mark.integration
NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


async def poll(probe: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll `probe` until it returns something truthy, under a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def status_is(layout: LabLayout, pod: str, **want: Any) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        st = layout.pod_status(pod)
        return st if st and all(st.get(k) == v for k, v in want.items()) else None
    return probe


async def get(url: str) -> httpx.Response | None:
    try:
        async with httpx.AsyncClient(verify=False, trust_env=False, timeout=2.0) as c:
            return await c.get(url)
    except httpx.HTTPError:
        return None


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[Path, str, list[int]]]:
    root = tmp_path / "hosts" / "m1"
    root.mkdir(parents=True)
    ip, ports = free_node_ip(4)
    try:
        yield root, ip, ports
    finally:
        stop_leftover_pods(root)  # nothing may outlive the test, even after a failure


@pytest.fixture
async def kubelet(node: tuple[Path, str, list[int]]) -> AsyncIterator[KubeletStandIn]:
    root, ip, _ = node
    k = KubeletStandIn(root, ip, poll_s=0.05)
    await k.start()
    try:
        yield k
    finally:
        await k.stop()


async def test_simulated_pod(node: tuple[Path, str, list[int]], kubelet: KubeletStandIn) -> None:
    root, ip, (port, port2, *_) = node
    layout = LabLayout(root)
    write_manifest(root, "kube-apiserver.yaml", apiserver_manifest(ip, port))
    failed = await poll(status_is(layout, "kube-apiserver", phase="Failed"), 10, "missing files to fail the pod")
    assert f"--tls-cert-file: {PKI}/server.crt does not exist on the node" in failed["reason"]
    assert await get(f"https://{ip}:{port}/livez") is None

    issue_pki(root, ip, key_mode=0o644)  # files there, but the key readable by all
    failed = await poll(lambda: (s := layout.pod_status("kube-apiserver")) and "mode 0644" in s["reason"] and s,
                        10, "the open key to fail the pod")
    assert "--tls-private-key-file" in failed["reason"] and "holds a private key" in failed["reason"]

    (root / PKI.lstrip("/") / "server.key").chmod(0o600)
    running = await poll(status_is(layout, "kube-apiserver", phase="Running", ready=True), 10, "the pod to run")
    assert running["mode"] == "simulated" and running["health"] == [f"https://{ip}:{port}/livez",
                                                                     f"https://{ip}:{port}/readyz"]
    resp = await get(f"https://{ip}:{port}/livez")
    assert resp is not None and resp.status_code == 200

    # WaitHealth through the lab backend: a loopback URL is the node's own address, the server
    # verified with the step's TLS files (this test's port is no component's: no CA of its own)
    backend = LabBackend(root, ip)
    executor = Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW)
    cmd = AgentCommand(command_id="h/1", cluster="c", node="m1", phase="health", issued_at="t",
                       steps=[WaitHealth(id="health:kube-apiserver", url=f"https://127.0.0.1:{port}/livez", tls=PROBE_TLS,
                                         timeout_s=10)])
    assert (await executor.run(cmd)).status == "Succeeded"

    layout.unhealthy_file("kube-apiserver").touch()
    resp = await get(f"https://{ip}:{port}/readyz")
    assert resp is not None and resp.status_code == 500 and "unhealthy" in resp.text
    await poll(status_is(layout, "kube-apiserver", ready=False), 10, "ready=false")
    short = cmd.model_copy(update={"steps": [WaitHealth(id="h", url=f"https://127.0.0.1:{port}/livez", tls=PROBE_TLS,
                                                                 timeout_s=0.5)]})
    res = await executor.run(short)
    assert res.status == "Failed" and "HTTP 500" in res.steps[0].stderr
    layout.unhealthy_file("kube-apiserver").unlink()
    await poll(status_is(layout, "kube-apiserver", ready=True), 10, "ready again")

    # a changed manifest restarts the pod (here: on another port)
    before = layout.pod_status("kube-apiserver")
    write_manifest(root, "kube-apiserver.yaml", apiserver_manifest(ip, port2))
    await poll(lambda: (s := layout.pod_status("kube-apiserver")) and s["manifestSha256"] != before["manifestSha256"]
               and s["phase"] == "Running", 10, "the restart")
    assert (r := await get(f"https://{ip}:{port2}/livez")) is not None and r.status_code == 200
    assert await get(f"https://{ip}:{port}/livez") is None

    # a flag naming a file that no volume mounts fails the pod, as inside a real container
    write_manifest(root, "kube-apiserver.yaml", apiserver_manifest(ip, port2, ("--audit-policy-file=/etc/audit/policy.yaml",)))
    failed = await poll(status_is(layout, "kube-apiserver", phase="Failed"), 10, "the unmounted file to fail it")
    assert "--audit-policy-file names /etc/audit/policy.yaml, which no volume of the pod mounts" in failed["reason"]

    write_manifest(root, "kube-apiserver.yaml", apiserver_manifest(ip, port2))
    await poll(status_is(layout, "kube-apiserver", phase="Running"), 10, "running again")
    (root / "etc/kubernetes/manifests/kube-apiserver.yaml").unlink()
    stopped = await poll(status_is(layout, "kube-apiserver", phase="Stopped"), 10, "the stop")
    assert stopped["reason"] == "manifest removed"
    assert await get(f"https://{ip}:{port2}/livez") is None


def _file(step_id: str, path: str, data: bytes, mode: int = 0o644) -> WriteFile:
    return WriteFile(id=step_id, path=path, mode=mode, content_b64=base64.b64encode(data).decode(),
                     sha256=hashlib.sha256(data).hexdigest())


async def test_real_etcd_static_pod(node: tuple[Path, str, list[int]]) -> None:
    """Through the agent's own steps: kubelet unit and binary, kubelet started, the etcd
    manifest written, health waited through the loopback mapping, then removed."""
    root, ip, (client, peer, metrics, _) = node
    layout = LabLayout(root)
    issue_pki(root, ip)
    kubelet_url = "http://repo.example/kubelet/v1.33.2/linux/amd64/kubelet"
    manifest = yaml.safe_dump(etcd_manifest(ip, client, peer, metrics)).encode()
    backend = LabBackend(root, ip, kubelet_poll_s=0.05)
    executor = Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW)

    async def run(*steps: Step) -> None:
        cmd = AgentCommand(command_id=f"c/{steps[0].id}", cluster="c", node="m1", phase="etcd", issued_at="t",
                           steps=list(steps))
        result = await executor.run(cmd)
        assert result.status == "Succeeded", result.model_dump_json(indent=1)

    await backend.start()
    try:
        await run(FetchFile(id="fetch:kubelet", url=kubelet_url, path="/usr/local/bin/kubelet",
                            sha256=lab_binary_sha256(kubelet_url)),
                  _file("unit", "/etc/systemd/system/kubelet.service",
                        b"[Service]\nExecStart=/usr/local/bin/kubelet --config=/var/lib/kubelet/config.yaml\n"),
                  SystemdUnit(id="systemd:kubelet", unit="kubelet.service", action="enable-now"))
        assert backend.kubelet.running
        await run(_file("write:etcd.yaml", "/etc/kubernetes/manifests/etcd.yaml", manifest, 0o600),
                  WaitHealth(id="health:etcd", url=f"http://127.0.0.1:{metrics}/health", expect_body='"health":"true"',
                             timeout_s=30))
        st = await poll(status_is(layout, "etcd", phase="Running", ready=True), 30, "etcd ready")
        assert st["mode"] == "real" and "3.5.1" in st["note"] and pid_alive(st["pid"])
        assert (root / "var/lib/etcd/member").is_dir()  # the data dir is in the node tree
        pki = root / PKI.lstrip("/")
        value = await asyncio.to_thread(etcd_put_get, f"https://{ip}:{client}", pki / "ca.crt",
                                        pki / "healthcheck-client.crt", pki / "healthcheck-client.key", "/bke/t", "ok")
        assert value == "ok"

        await run(RemoveFile(id="rm:etcd.yaml", path="/etc/kubernetes/manifests/etcd.yaml"))
        await poll(status_is(layout, "etcd", phase="Stopped"), 20, "etcd stopped")
        await poll(lambda: not pid_alive(st["pid"]), 20, "the etcd process to exit")

        # again, then the agent stops: its pods stop with it (by PID)
        await run(_file("write:etcd.yaml", "/etc/kubernetes/manifests/etcd.yaml", manifest, 0o600))
        st = await poll(status_is(layout, "etcd", phase="Running"), 30, "etcd running again")
    finally:
        await backend.stop()
    assert not pid_alive(st["pid"])
    assert layout.pod_status("etcd")["phase"] == "Stopped"
    assert layout.unit_state("kubelet.service")["active"] is True  # the unit stays enabled: a restart resumes


async def test_leftover_etcd_of_a_killed_agent_is_stopped(node: tuple[Path, str, list[int]]) -> None:
    root, ip, (client, peer, metrics, _) = node
    layout = LabLayout(root)
    issue_pki(root, ip)
    write_manifest(root, "etcd.yaml", etcd_manifest(ip, client, peer, metrics))
    first = KubeletStandIn(root, ip, poll_s=0.05)
    await first.start()
    st = await poll(status_is(layout, "etcd", phase="Running", ready=True), 30, "etcd ready")
    old_pid = st["pid"]
    first._task.cancel()  # the agent "dies": its loop is gone, its etcd is not
    await asyncio.gather(first._task, return_exceptions=True)
    assert pid_alive(old_pid)

    second = KubeletStandIn(root, ip, poll_s=0.05)
    await second.start()
    try:
        assert not pid_alive(old_pid)  # stopped at start, before anything else binds the ports
        new = await poll(lambda: (s := layout.pod_status("etcd")) and s["phase"] == "Running" and s["pid"] != old_pid
                         and s["ready"] and s, 30, "a fresh etcd")
    finally:
        await second.stop()
    assert not pid_alive(new["pid"]) and os.path.isdir(root / "var/lib/etcd/member")


async def test_entrypoint_pod_is_simulated_with_its_volumes(node: tuple[Path, str, list[int]],
                                                            kubelet: KubeletStandIn) -> None:
    """haproxy/keepalived run their image's entrypoint: no command to check or run, but their
    hostPath volumes are made as the kubelet makes them and their probe is served."""
    root, ip, (port, *_) = node
    layout = LabLayout(root)
    write_manifest(root, "haproxy.yaml", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "haproxy", "namespace": "kube-system"},
        "spec": {"hostNetwork": True, "containers": [{
            "name": "haproxy", "image": "docker.io/library/haproxy:2.8.5-alpine",
            "livenessProbe": {"httpGet": {"host": "127.0.0.1", "path": "/healthz", "port": port, "scheme": "HTTP"}},
            "volumeMounts": [{"mountPath": "/usr/local/etc/haproxy/haproxy.cfg", "name": "conf", "readOnly": True}]}],
            "volumes": [{"name": "conf", "hostPath": {"path": "/etc/haproxy/haproxy.cfg", "type": "FileOrCreate"}}]},
    })
    st = await poll(status_is(layout, "haproxy", phase="Running", ready=True), 10, "haproxy running")
    assert st["mode"] == "simulated" and (root / "etc/haproxy/haproxy.cfg").is_file()
    resp = await get(f"http://{ip}:{port}/healthz")
    assert resp is not None and resp.status_code == 200


async def test_restart_static_pod_step_and_serving_certificate_reload(node: tuple[Path, str, list[int]],
                                                                      kubelet: KubeletStandIn) -> None:
    """RestartStaticPod through the lab backend restarts the pod from its manifest; a renewed
    serving pair is served at the next handshake without any restart (the apiserver's dynamic
    serving certificate)."""
    import ssl

    from bke.contracts.agent_steps import RestartStaticPod
    from bke.core.pki.material import cert_info

    root, ip, (port, *_) = node
    layout = LabLayout(root)
    issue_pki(root, ip)
    write_manifest(root, "kube-apiserver.yaml", apiserver_manifest(ip, port))
    first = await poll(status_is(layout, "kube-apiserver", phase="Running", ready=True), 10, "the pod to run")

    async def served_serial() -> int:  # in a thread: the pod serves on this test's own loop
        pem = await asyncio.to_thread(ssl.get_server_certificate, (ip, port), timeout=5)
        return cert_info(pem.encode()).serial

    crt = root / PKI.lstrip("/") / "server.crt"
    assert await served_serial() == cert_info(crt.read_bytes()).serial
    issue_pki(root, ip)  # new CA, new pair, same paths: what a renewal writes
    assert await served_serial() == cert_info(crt.read_bytes()).serial
    assert layout.pod_status("kube-apiserver")["startedAt"] == first["startedAt"]  # not restarted

    backend = LabBackend(root, ip)
    backend.kubelet = kubelet  # the backend's own stand-in is this running one
    executor = Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW)
    step = RestartStaticPod(id="restart:kube-apiserver", manifest="/etc/kubernetes/manifests/kube-apiserver.yaml")
    cmd = AgentCommand(command_id="r/1", cluster="c", node="m1", phase="rotate@r", issued_at="t", steps=[step])
    assert (await executor.run(cmd)).status == "Succeeded"
    again = await poll(status_is(layout, "kube-apiserver", phase="Running"), 10, "the restarted pod")
    assert again["startedAt"] != first["startedAt"]
    missing = step.model_copy(update={"manifest": "/etc/kubernetes/manifests/kube-scheduler.yaml"})
    res = await executor.run(cmd.model_copy(update={"command_id": "r/2", "steps": [missing]}))
    assert res.status == "Failed" and "runs no static pod from this manifest" in res.steps[0].stderr


async def test_etcd_image_version_mapped_to_a_missing_binary_fails_to_start(node: tuple[Path, str, list[int]]) -> None:
    """BKE_LAB_ETCD_BINARIES (lab only): an etcd image whose version is mapped runs that binary;
    a mapped binary that is missing is a pod that cannot start and says why, never the default
    etcd 3.5.1 in its place."""
    root, ip, (client, peer, metrics, _) = node
    layout = LabLayout(root)
    issue_pki(root, ip)
    missing = root.parent / "no-such-etcd"
    write_manifest(root, "etcd.yaml", etcd_manifest(ip, client, peer, metrics))  # registry.k8s.io/etcd:3.5.21-0
    k = KubeletStandIn(root, ip, poll_s=0.05, etcd_binaries={"3.5.21": missing})
    await k.start()
    try:
        st = await poll(status_is(layout, "etcd", phase="Failed"), 10, "the etcd pod failing to start")
        assert st["reason"].startswith(f"cannot start {missing}: "), st["reason"]
        assert st["note"] == f"image registry.k8s.io/etcd:3.5.21-0 runs {missing} (BKE_LAB_ETCD_BINARIES)"
        assert st["pid"] is None
    finally:
        await k.stop()
