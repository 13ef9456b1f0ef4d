"""Every step type limited by kind, removals by class and path, the kind held to the operation its
command id names, and the agent refusing such a command (or one with a kubeconfig that names a
program, sealed or not) as a whole before any step runs; each refusal beside the legitimate
command it must not stop."""
from __future__ import annotations

import base64
import hashlib
import typing

import pytest

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import (
    CheckHost,
    EtcdMemberAdd,
    EtcdSnapshot,
    LeaveEtcdMember,
    NewFile,
    ParkStaticPod,
    RemoveFile,
    ReplaceFiles,
    ResetNode,
    RestartStaticPod,
    RestoreEtcdMember,
    RunProgram,
    Step,
    WaitHealth,
    WriteFile,
)
from bke.core.host_actions import HOST_ACTIONS, command_refusal
from bke.core.host_actions.endpoints import HEALTH_ENDPOINTS, NO_SERVING_CA, SERVING_CAS, serving_ca
from bke.core.host_actions.origins import origin_refusal
from bke.core.host_actions.table import LIMITED_BY_TARGETS
from bke.core.secrets import public_key_from_raw, seal
from tests.command_ids import command_id_for
from tests.trust_helpers import signed

from tests.unit.agent.test_agent_handling import NOW, FakeJS, FakeMsg, _loop
from tests.unit.core.test_host_actions import EXEC, KUBECONFIG, _write

PKI = "/etc/kubernetes/pki"
MEMBER = dict(endpoint="https://127.0.0.1:2379", etcd_cluster="etcd-data", member="m1", peer_url="https://10.0.0.1:2380")
RESET = ResetNode(id="reset-node", etcd_data_dirs=["/var/lib/etcd"], binaries=True)
SNAPSHOT = EtcdSnapshot(id="snap", endpoint="https://127.0.0.1:2379", etcd_cluster="etcd-data", member="m1",
                        snapshot_id="s1", object_name="o", recipient_b64="k" * 44)
LEAVE = LeaveEtcdMember(id="leave", manifest="/etc/kubernetes/manifests/etcd.yaml", data_dir="/var/lib/etcd")
PARK = ParkStaticPod(id="park", manifest="/etc/kubernetes/manifests/etcd.yaml", parked=True)
RESTORE = RestoreEtcdMember(id="restore", restore_id="r1", etcd_cluster="etcd-data", member="m1",
                            initial_cluster="m1=https://10.0.0.1:2380", token="t", peer_url="https://10.0.0.1:2380",
                            data_dir="/var/lib/etcd", aside_dir="/var/lib/etcd.aside", sha256="0" * 64, size=1)
CHECK = CheckHost(id="check", checks=["disk"])
RESTART = RestartStaticPod(id="restart", manifest="/etc/kubernetes/manifests/kube-scheduler.yaml")
ADD = EtcdMemberAdd(id="add", **MEMBER)


def _refusal(phase: str, *steps: Step, cid: str | None = None) -> str | None:
    return command_refusal(AgentCommand(command_id=cid or command_id_for(phase), cluster="c", node="n", phase=phase,
                                        issued_at="t", steps=list(steps)))


CASES = [
    # (a kind that may not carry it, one that does)
    (("node-env", RESET), ("reset@r1", RESET)),
    (("upgrade:cleanup", RESET), ("remove@r1", RESET)),
    (("node-env", SNAPSHOT), ("reset@r1", SNAPSHOT)),
    (("health", SNAPSHOT), ("upgrade:etcd-snapshots", SNAPSHOT)),
    (("upgrade:etcd", LEAVE), ("upgrade:cleanup", LEAVE)),
    (("reset@r1", PARK), ("etcd-restore:stop-members", PARK)),
    (("upgrade:etcd", RESTORE), ("etcd-restore:restore-members", RESTORE)),
    (("certs", CHECK), ("node-env", CHECK)),
    (("health", RESTART), ("rotate@r1", RESTART)),
    (("upgrade:etcd-member-remove", ADD), ("upgrade:etcd-member-add", ADD)),
    (("certs", WaitHealth(id="h", url="http://127.0.0.1:10248/healthz")),
     ("health", WaitHealth(id="h", url="http://127.0.0.1:10248/healthz"))),
    # removals: by class and path
    (("upgrade:cleanup", RemoveFile(id="rm", path="/etc/kubernetes/manifests/kube-apiserver.yaml")),
     ("upgrade:kube-apiserver", RemoveFile(id="rm", path="/etc/kubernetes/manifests/kube-apiserver.yaml"))),
    (("upgrade:kube-apiserver", RemoveFile(id="rm", path="/etc/kubernetes/manifests/etcd.yaml")),
     ("upgrade:kube-apiserver", RemoveFile(id="rm", path="/etc/kubernetes/manifests/kube-apiserver.yaml"))),
    (("upgrade:kube-apiserver", RemoveFile(id="rm", path=f"{PKI}/apiserver.key")),
     ("upgrade:cleanup", RemoveFile(id="rm", path=f"{PKI}/apiserver.key"))),
    (("upgrade:cleanup", RemoveFile(id="rm", path="/etc/systemd/system/kubelet.service")),
     ("upgrade:cleanup", RemoveFile(id="rm", path="/etc/crictl.yaml"))),
    (("upgrade:cleanup", RemoveFile(id="rm", path=f"{PKI}/../../passwd")),
     ("upgrade:cleanup", RemoveFile(id="rm", path=f"{PKI}/front-proxy-client.key"))),
    (("rotate@r1", RemoveFile(id="rm", path="/etc/keepalived/keepalived.conf")),
     ("upgrade:load-balancer", RemoveFile(id="rm", path="/etc/keepalived/keepalived.conf"))),
    # what a restore's park probes is the node's own endpoint
    (("etcd-restore:stop-members", PARK.model_copy(update={"port_url": "http://169.254.169.254:2381/health"})),
     ("etcd-restore:stop-members", PARK.model_copy(update={"port_url": "http://127.0.0.1:2381/health"}))),
]


@pytest.mark.parametrize("refused, control", CASES, ids=[f"{r[0]}:{r[1].type}" for r, _ in CASES])
def test_every_step_type_is_limited_by_kind(refused: tuple[str, Step], control: tuple[str, Step]) -> None:
    why = _refusal(*refused)
    assert why is not None and why.startswith(f"step {refused[1].id}: "), why
    assert _refusal(*control) is None


def test_every_step_type_of_the_contract_has_its_limits() -> None:
    """A step type added to the contract is carried by no command until a row names it."""
    types = {typing.get_args(m.model_fields["type"].annotation)[0] for m in typing.get_args(typing.get_args(Step)[0])}
    named = {t for row in HOST_ACTIONS if row.action == "step" for t in row.targets}
    assert LIMITED_BY_TARGETS | named == types and not LIMITED_BY_TARGETS & named
    why = _refusal("node-env", RESET)
    assert why == ("step reset-node: node-env commands may not carry a reset_node step (only remove, reset commands "
                   "may; bke.core.host_actions.HOST_ACTIONS)")


@pytest.mark.parametrize("cid, phase", [
    ("c/reset@r1/n/0", "node-env"),  # node-env under a reset's id
    ("c/node-env/n/0", "certs"),  # another install phase's id
    ("c/health@3/n/0", "upgrade:masters-runtime"),
    ("c/upgrade@r1@etcd.etcd-data/n/0", "upgrade:kube-apiserver"),
    ("c/upgrade@r1@etcd-snapshots/n/0", "reset@r1"),
    ("c/restore@r1@stop-members/n/0", "etcd-restore:restore-members"),
    ("c/rotate@r1/n/0", "rotate@r2"),  # another request's
    ("c/reset@r1/n/0", "remove@r1"),
    ("c/node-env/n", "node-env"),  # not the id's shape
    ("c/node-env/n/0/1", "node-env"),
    ("c/node-env/n/", "node-env"),
    ("d/node-env/n/0", "node-env"),  # another cluster's
    ("c/node-env/m/0", "node-env"),  # another node's
    ("c/node-env node-env/n/0", "node-env"),
])
def test_the_kind_agrees_with_the_operation_its_id_names(cid: str, phase: str) -> None:
    assert origin_refusal(cid, phase, "c", "n") is not None


@pytest.mark.parametrize("cid, phase", [
    ("c/node-env/n/0", "node-env"), ("c/health/n/2", "health"), ("c/join@j1/n/4", "control-plane-join"),
    ("c/health@3/n/0", "health"), ("c/rotate@r1/n/0", "rotate@r1"), ("c/reset@r1/n/2", "reset@r1"),
    ("c/remove@a@b/n/0", "remove@a@b"), ("c/upgrade@r1@etcd.etcd-data/n/0", "upgrade:etcd"),
    ("c/upgrade@r@1@etcd-member-add.etcd-data:m2/n/0", "upgrade:etcd-member-add"),
    ("c/restore@r1@stop-members/n/0", "etcd-restore:stop-members"),
])
def test_what_the_senders_name_passes(cid: str, phase: str) -> None:
    assert origin_refusal(cid, phase, "c", "n") is None


def test_https_probes_name_the_ca_that_verifies_them() -> None:
    https = {p for p, (scheme, _, _) in HEALTH_ENDPOINTS.items() if scheme == "https"}
    assert SERVING_CAS.keys() | NO_SERVING_CA == https and not SERVING_CAS.keys() & NO_SERVING_CA
    assert serving_ca("https://127.0.0.1:6443/livez") == f"{PKI}/ca.crt"
    assert serving_ca("https://127.0.0.1:10259/healthz") is None and serving_ca("http://127.0.0.1:2381/health") is None
    with pytest.raises(ValueError):
        serving_ca("https://127.0.0.1:2381/health")


# ---- the agent refuses such a command as a whole, before any step runs ----

def _signed(phase: str, *steps: Step, cid: str | None = None) -> bytes:
    return signed(AgentCommand(command_id=cid or command_id_for(phase, "c1", "n1"), cluster="c1", node="n1",
                               phase=phase, issued_at=NOW.isoformat(), steps=list(steps))).to_bytes()


async def _handled(body: bytes) -> tuple[list[str], bytes, int]:
    events: list[str] = []
    js = FakeJS(events)
    loop, backend = _loop(events, js)
    await loop._on_msg(FakeMsg(body, events))  # type: ignore[arg-type]
    return events, js.published[-1][1], backend.steps_run


SWAP = RunProgram(id="swap:off", argv=["swapoff", "-a"])


async def test_a_command_with_a_step_type_its_kind_may_not_carry_runs_nothing() -> None:
    events, refused, ran = await _handled(_signed("node-env", SWAP, RESET))
    assert events == ["publish:refused", "term"] and ran == 0
    assert b"node-env commands may not carry a reset_node step" in refused
    events, _, ran = await _handled(_signed("node-env", SWAP, CHECK))
    assert events == ["store", "publish:result", "ack"] and ran == 2


async def test_a_command_under_another_operations_id_runs_nothing() -> None:
    events, refused, ran = await _handled(_signed("node-env", SWAP, cid="c1/reset@r1/n1/0"))
    assert events == ["publish:refused", "term"] and ran == 0 and b"bke.core.host_actions.origins" in refused
    events, _, ran = await _handled(_signed("node-env", SWAP, cid="c1/join@j1/n1/0"))
    assert events == ["store", "publish:result", "ack"] and ran == 1


def _sealed_write(path: str, data: bytes, public_key_b64: str) -> WriteFile:
    sealed = seal(public_key_from_raw(base64.b64decode(public_key_b64)), data)
    return WriteFile(id=f"sealed:{path}", path=path, mode=0o600, sealed_b64=base64.b64encode(sealed).decode(),
                     sha256=hashlib.sha256(data).hexdigest())


@pytest.mark.parametrize("where", ["write", "replace"])
async def test_a_sealed_kubeconfig_naming_a_program_refuses_the_whole_command(where: str) -> None:
    """The bad kubeconfig is the last step, sealed to the agent: opened and checked before the
    first step runs."""
    events: list[str] = []
    js = FakeJS(events)
    loop, backend = _loop(events, js)
    key = loop.identity.public_key_b64

    def command(text: bytes) -> bytes:
        bad = _sealed_write("/etc/kubernetes/scheduler.conf", text, key)
        last: Step = bad if where == "write" else ReplaceFiles(id="replace", files=[NewFile(
            path=bad.path, mode=0o600, sealed_b64=bad.sealed_b64, sha256=bad.sha256)])
        return _signed("rotate@r1", _write(f"{PKI}/ca.crt"), last)

    await loop._on_msg(FakeMsg(command(EXEC), events))  # type: ignore[arg-type]
    assert events == ["publish:refused", "term"] and backend.steps_run == 0
    assert b"scheduler.conf" in js.published[-1][1] and b"exec" in js.published[-1][1]
    assert EXEC not in js.published[-1][1]
    events.clear()
    await loop._on_msg(FakeMsg(command(KUBECONFIG), events))  # type: ignore[arg-type]
    assert events == ["store", "publish:result", "ack"] and backend.steps_run == 2
