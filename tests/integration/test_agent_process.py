"""`bke-agent run` as its own OS process in the lab: it registers, opens files sealed to its
key, starts the kubelet stand-in and a real etcd; killed with SIGKILL it leaves etcd behind,
and the next start stops that leftover, resumes the pod, catches up with the command sent
meanwhile and replays (not re-runs) a completed one; SIGTERM stops it and its etcd."""
from __future__ import annotations

import base64
import hashlib
import os
import signal
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from bke.adapters.bus.watch import EventWatch, Seen
from bke.contracts.agent import AgentCommand, agent_subject
from bke.contracts.agent_steps import FetchFile, Step, SystemdUnit, WaitHealth, WriteFile
from bke.lab.standins.binary_placeholder import lab_binary_sha256
from bke.adapters.runtime import ManagedProcess, pid_alive, poll_until
from bke.core.secrets.sealing import public_key_from_raw, seal
from bke_agent import LabLayout, execution_counts
from tests.trust_helpers import SIGNER, signed

from .agent_helpers import PKI, etcd_manifest, free_node_ip, issue_pki, stop_leftover_pods

pytestmark = pytest.mark.integration
TIMEOUT = 30.0
KUBELET_URL = "http://repo.example/kubelet/v1.33.2/linux/amd64/kubelet"


@pytest.fixture
def lab_node(tmp_path: Path) -> Iterator[tuple[Path, str, list[int], list[ManagedProcess]]]:
    root = tmp_path / "hosts" / "m1"
    root.mkdir(parents=True)
    ip, ports = free_node_ip(fixed=(2379, 2380, 2381))  # etcd's: a probe asks only the known health ports
    procs: list[ManagedProcess] = []
    try:
        yield root, ip, ports, procs
    finally:
        for p in procs:
            p.stop()
        stop_leftover_pods(root)


def _start_agent(nats_url: str, cluster: str, root: Path, ip: str, log: Path) -> ManagedProcess:
    env = dict(os.environ, BKE_NATS_URL=nats_url, BKE_AGENT_CLUSTER=cluster, BKE_AGENT_NODE="m1",
               BKE_AGENT_BACKEND="lab", BKE_AGENT_ROOT=str(root), BKE_AGENT_IP=ip, BKE_AGENT_HEARTBEAT_S="0.5",
               BKE_AGENT_ACK_WAIT_S="5", BKE_AGENT_KUBELET_POLL_S="0.05",
               BKE_AGENT_COMMAND_KEY=SIGNER.verify_key.public_line)
    return ManagedProcess.start("bke-agent", [Path(sys.executable).parent / "bke-agent", "run"], log, env=env)


def _file(path: str, data: bytes, mode: int, sealed_to: str | None = None) -> WriteFile:
    digest = hashlib.sha256(data).hexdigest()
    if sealed_to is None:
        return WriteFile(id=f"write:{path}", path=path, mode=mode, content_b64=base64.b64encode(data).decode(), sha256=digest)
    blob = seal(public_key_from_raw(base64.b64decode(sealed_to)), data)
    return WriteFile(id=f"write:{path}", path=path, mode=mode, sealed_b64=base64.b64encode(blob).decode(), sha256=digest)


def _cmd(cluster: str, cid: str, *steps: Step, phase: str = "etcd") -> AgentCommand:
    return signed(AgentCommand(command_id=cid, cluster=cluster, node="m1", phase=phase,
                               issued_at=datetime.now(timezone.utc).isoformat(), steps=list(steps)))


def _result(cid: str, replayed: bool = False):  # noqa: ANN202
    return lambda e: e.subject.endswith(".result") and e.data["commandId"] == cid and e.data["replayed"] is replayed


async def test_agent_process_survives_sigkill_and_stops_on_sigterm(
        nats_client: NatsClient, js: JetStreamContext, nats_url: str, cluster: str,  # noqa: F811
        lab_node: tuple[Path, str, list[int], list[ManagedProcess]], tmp_path: Path) -> None:
    root, ip, (client, peer, metrics), procs = lab_node
    layout = LabLayout(root)
    material = tmp_path / "material"  # the PKI as the certs service would make it, sent over the bus
    issue_pki(material, ip)
    subject = agent_subject(cluster, "m1", "command")
    async with EventWatch(nats_client, [f"bke.v1.agent.{cluster}.>"]) as watch:
        procs.append(agent := _start_agent(nats_url, cluster, root, ip, tmp_path / "agent1.log"))
        reg = await watch.wait_for(lambda e: e.subject.endswith(".registered"), TIMEOUT)
        key = reg.data["sealPublicKeyB64"]
        pki_steps = [_file(f"{PKI}/{f.name}", f.read_bytes(), 0o600 if f.suffix == ".key" else 0o644,
                           key if f.suffix == ".key" else None)
                     for f in sorted((material / PKI.lstrip("/")).iterdir())]
        manifest = yaml.safe_dump(etcd_manifest(ip, client, peer, metrics)).encode()
        health = WaitHealth(id="health:etcd", url=f"http://127.0.0.1:{metrics}/health", expect_body='"health":"true"',
                            timeout_s=30)
        # as the install sends them: each kind of command does only its own work (bke.core.host_actions)
        certs = _cmd(cluster, f"{cluster}/certs/m1/0", *pki_steps, phase="certs")
        env = _cmd(cluster, f"{cluster}/node-env/m1/0",
                   FetchFile(id="fetch:kubelet", url=KUBELET_URL, path="/usr/bin/kubelet",
                             sha256=lab_binary_sha256(KUBELET_URL)),
                   _file("/etc/systemd/system/kubelet.service", b"[Service]\nExecStart=/usr/bin/kubelet\n", 0o644),
                   SystemdUnit(id="systemd:kubelet", unit="kubelet.service", action="enable-now"), phase="node-env")
        first = _cmd(cluster, f"{cluster}/etcd/m1/0", _file("/etc/kubernetes/manifests/etcd.yaml", manifest, 0o600), health)
        for cmd in (certs, env, first):
            await js.publish(subject, cmd.to_bytes())
            done = await watch.wait_for(_result(cmd.command_id), TIMEOUT)
            assert done.data["status"] == "Succeeded", done.data
        key_file = root / PKI.lstrip("/") / "server.key"
        assert key_file.read_bytes() == (material / PKI.lstrip("/") / "server.key").read_bytes()
        assert (key_file.stat().st_mode & 0o777) == 0o600
        old_etcd = layout.pod_status("etcd")["pid"]

        os.kill(agent.pid, signal.SIGKILL)  # the agent dies; its etcd does not
        poll_until(lambda: True if not agent.alive() else None, timeout=10, what="the agent to die")
        assert pid_alive(old_etcd)
        while_down = _cmd(cluster, f"{cluster}/health@1/m1/0", health, phase="health")
        await js.publish(subject, while_down.to_bytes())

        procs.append(agent := _start_agent(nats_url, cluster, root, ip, tmp_path / "agent2.log"))
        await watch.wait_for(_result(while_down.command_id), TIMEOUT)
        assert not pid_alive(old_etcd)  # the leftover was stopped, a fresh etcd serves
        new_etcd = layout.pod_status("etcd")["pid"]
        assert new_etcd != old_etcd and pid_alive(new_etcd)
        await js.publish(subject, first.to_bytes())  # a re-send of the completed first command
        replay = await watch.wait_for(_result(first.command_id, replayed=True), TIMEOUT)
        assert replay.data["status"] == "Succeeded"

        os.kill(agent.pid, signal.SIGTERM)
        poll_until(lambda: True if not agent.alive() else None, timeout=30, what="the agent to stop")
        assert not pid_alive(new_etcd)
    heartbeats: list[Seen] = [e for e in watch.seen if "heartbeat" in e.subject]
    assert heartbeats == []  # heartbeats go to bke.v1.heartbeat.*, outside the agent stream
    assert execution_counts(root / "var/lib/bke-agent") == {certs.command_id: 1, env.command_id: 1, first.command_id: 1,
                                                            while_down.command_id: 1}
    log_text = (tmp_path / "agent1.log").read_text() + (tmp_path / "agent2.log").read_text()
    assert "PRIVATE KEY" not in log_text and '"level": "ERROR"' not in log_text
