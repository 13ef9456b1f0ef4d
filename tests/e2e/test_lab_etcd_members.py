"""etcd-events membership changes in a whole lab (split etcd; every agent a process with its own bus
identity; real etcd 3.5.1 members run by the kubelet stand-ins): the steps of `member_sequences`
sent as signed commands, with the dispatcher's identity and the deployment's command key, as the
apply runner will send them.

What a lab cannot do yet: join new nodes (the apply runner's `join`, with the certificates the
certs service issues for the new plan). So the installed three-member etcd-events is first shrunk
to one through the steps (EtcdMemberRemove on a member that stays; the removed member's manifest
taken away with RemoveFile; its data dir cleared by the test, as the node's reset would), then
grown back 1 -> 3: each member added as a learner, its manifest rendered with `etcd_joins`
(`--initial-cluster-state=existing`) written with WriteFile, promoted, and every member's health
waited for with WaitHealth. The data written before both changes is read back through each
member with the apiserver's etcd client certificate, and the installed apiserver's
`--etcd-servers-overrides` names the three members."""
from __future__ import annotations

import asyncio
import base64
import hashlib
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from redis import Redis
from redis.asyncio import Redis as AsyncRedis

from bke.adapters.auth.permissions import inbox_prefix
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.agent import AgentCommand, CommandResult, agent_subject
from bke.contracts.agent_steps import LeaveEtcdMember, Step, WaitHealth, WriteFile
from bke.lab.identities import creds_path
from bke.lab.key_files import lab_key_file
from bke.core.lifecycle.etcd_members import agent_step, etcd_joins, member_sequences
from bke.core.plan import Plan, plan_spec_text
from bke.core.render import RenderInputs, render_cluster
from bke.adapters.runtime import etcd_put_get, port_is_free
from bke.core.secrets import load_secret_box
from bke.core.secrets.signing import ensure_command_key_sync, sign_command
from bke.adapters.state.command_signing import read_bindings
from bke.adapters.state.keys.trust import command_signing_key

from .lab_helpers import Lab, assert_reads_back, etcd_members
from tests.command_ids import command_id_for
from tests.unit.upgrade_helpers import events_spec

# slow: a lab of its own (38 s here: the install, then both changes); the integration test
# tests/integration/test_etcd_members.py covers the same steps on real etcd without a lab
pytestmark = [pytest.mark.e2e, pytest.mark.slow]
NET = "127.0.23"
EVENTS = ("events1", "events2", "events3")
# the upgrade step each step type is sent in (bke.core.host_actions limits each type by kind)
STEP_OF = {"etcd_member_add": "etcd-member-add", "etcd_member_promote": "etcd-member-promote",
           "etcd_member_remove": "etcd-member-remove", "wait_health": "etcd-health", "leave_etcd_member": "cleanup"}
KEYS = {f"/registry/events/default/e2e-{i}": f"before-the-changes-{i}" for i in range(5)}


def _spec(events: tuple[str, ...]) -> str:
    return events_spec("grow", NET, events)


class Commands:
    """Signed commands to the lab's agents, with the dispatcher's bus identity."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab
        r = Redis.from_url(lab.info.redis_url)
        try:
            self.signer = ensure_command_key_sync(r, command_signing_key(), load_secret_box(lab_key_file(lab.workdir, "signing")))
        finally:
            r.close()
        self.nc: Any = None

    async def __aenter__(self) -> "Commands":
        self.nc = await connect_nats(BusAccess(self.lab.info.nats_url, creds_path(self.lab.workdir, "dispatcher"),
                                               inbox_prefix("dispatcher"), self.lab.access.tls_ca))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.nc.close()

    async def run(self, node: str, steps: list[Step], timeout: float = 180, phase: str = "") -> CommandResult:
        cluster = self.lab.plan.cluster
        # the kind the upgrader sends each step under (bke.core.host_actions), unless given
        phase = phase or f"upgrade:{STEP_OF[steps[0].type]}"
        sub = await self.nc.subscribe(agent_subject(cluster, node, "result"))
        try:
            cmd = AgentCommand(command_id=command_id_for(phase, cluster, node, uuid.uuid4().int % 10**12), cluster=cluster,
                               node=node, phase=phase, issued_at=datetime.now(timezone.utc).isoformat(), steps=steps)
            # bound to the receiver as the dispatcher binds its commands (bke.core.secrets.binding)
            ar = AsyncRedis.from_url(self.lab.info.redis_url)
            try:
                binding = (await read_bindings(ar, cluster, [node]))[node]
            finally:
                await ar.aclose()
            await self.nc.jetstream().publish(agent_subject(cluster, node, "command"),
                                              sign_command(cmd, self.signer, binding=binding).to_bytes())
            while True:
                result = CommandResult.model_validate_json((await sub.next_msg(timeout=timeout)).data)
                if result.command_id == cmd.command_id:
                    return result
        finally:
            await sub.unsubscribe()


def _health(plan: Plan, host: str) -> WaitHealth:
    ec = plan.etcd_cluster("etcd-events")
    assert ec is not None
    return WaitHealth(id=f"etcd-events-health/{host}", url=f"http://127.0.0.1:{ec.metrics_port}/health",
                      expect_body='"health":"true"', timeout_s=90)


async def _checked(commands: Commands, node: str, steps: list[Step], phase: str = "") -> CommandResult:
    result = await commands.run(node, steps, phase=phase)
    assert result.status == "Succeeded", result.model_dump_json(indent=1)
    return result


async def test_etcd_events_shrunk_to_one_then_grown_to_three_through_signed_commands(lab_factory, tmp_path: Path):
    three_text, one_text = _spec(EVENTS), _spec(EVENTS[:1])
    (tmp_path / "spec.yaml").write_text(three_text)
    lab: Lab = lab_factory(str(tmp_path / "spec.yaml"))
    assert await lab.install() == 0, lab.out.getvalue()
    three, one = lab.plan, plan_spec_text(one_text).plan
    assert one is not None
    ec = three.etcd_cluster("etcd-events")
    assert ec is not None
    pki = lab.host("m1") / "etc/kubernetes/pki"
    tls = (pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    for k, v in KEYS.items():
        assert await asyncio.to_thread(etcd_put_get, ec.members[0].client_url, *tls, k, v) == v
    manifest = f"/etc/kubernetes/manifests/{ec.manifest}"

    async with Commands(lab) as commands:
        # shrink 3 -> 1: removals one at a time, asked of a member that stays
        [shrink] = member_sequences(three, one)
        assert [(s.kind, s.member, s.run_on) for s in shrink.steps] == [
            ("remove-member", "events2", "events1"), ("check-health", "events2", "events1"),
            ("remove-member", "events3", "events1"), ("check-health", "events3", "events1")]
        for s in shrink.steps:
            if s.kind == "remove-member":
                step = agent_step(s, ec)
                assert step is not None
                out = await _checked(commands, s.run_on, [step])
                assert f"removed {s.member}" in out.steps[0].stdout
                # the node leaves: the manifest taken away, then (once the pod stopped) the data dir
                await _checked(commands, s.member, [LeaveEtcdMember(id="leave", manifest=manifest, data_dir=ec.data_dir)])
                assert port_is_free(three.node(s.member).ip, ec.client_port), f"{s.member}'s etcd still listens"
                assert not (lab.host(s.member) / ec.data_dir.lstrip("/")).exists()
            else:
                for h in s.healthy:
                    await _checked(commands, h, [_health(three, h)])

        # grow 1 -> 3, one learner at a time, through the same steps
        joined = render_cluster(three, RenderInputs(etcd_joins=etcd_joins(one, three)))
        [grow] = member_sequences(one, three)
        kinds = []
        for s in grow.steps:
            kinds.append((s.kind, s.member, s.run_on))
            if s.kind == "start-member":
                f = joined.node(s.member).file(manifest)
                assert f is not None and b"--initial-cluster-state=existing" in f.content
                await _checked(commands, s.member, [WriteFile(
                    id="etcd-events-manifest", path=manifest, mode=f.mode, content_b64=base64.b64encode(f.content).decode(),
                    sha256=hashlib.sha256(f.content).hexdigest())], phase="etcd")  # as the member's join writes it
            elif s.kind == "check-health":
                for h in s.healthy:
                    await _checked(commands, h, [_health(three, h)])
            else:
                step = agent_step(s, ec)
                assert step is not None
                await _checked(commands, s.run_on, [step])
        assert kinds == [(k, m, r) for m in ("events2", "events3") for k, r in (
            ("add-learner", "events1"), ("start-member", m), ("promote", "events1"), ("check-health", "events1"))]

    # three voters, the data of before through each, with the apiserver's etcd client certificate
    members = await etcd_members(ec.members[0].client_url, tls)
    assert sorted(m["name"] for m in members) == list(EVENTS) and not any(m.get("isLearner") for m in members)
    for m in ec.members:
        await assert_reads_back(m.client_url, tls, KEYS)
    # the apiserver is told to send /events to the three members
    command = lab.manifest("m1", "kube-apiserver.yaml")["spec"]["containers"][0]["command"]
    overrides = next(a for a in command if a.startswith("--etcd-servers-overrides="))
    for m in ec.members:
        assert m.client_url in overrides
