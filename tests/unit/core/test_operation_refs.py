"""Results are routed by the operation they answer (bke.contracts.operation_ref): the one the agent
echoed, else (an agent of an earlier release) the one the command id names; the dispatcher, the
one service that hears agents, sends the upgrader's on and keeps its own."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest
from bke_dispatcher.ops.join.decide import SLUG_PREFIX as JOIN
from bke_dispatcher.ops.removal.decide import REMOVAL_SLUG_PREFIX as REMOVAL
from bke_dispatcher.ops.reset.decide import SLUG_PREFIX as RESET
from bke_dispatcher.ops.rotation.decide import SLUG_PREFIX as ROTATION
from bke_dispatcher.results import Inputs

from bke.adapters.operation import Operations
from bke.contracts.agent import AgentCommand, CommandResult
from bke.contracts.node_commands import NODE_COMMANDS_ANSWERED, NodeCommandAnswered
from bke.contracts.operation_ref import OperationKind, OperationRef, owner
from bke.core.etcdsnap.restore_run import SLUG_PREFIX as RESTORE
from bke.core.operation.refs import LEGACY_SLUGS, ref_of, ref_of_command_id
from bke.core.secrets.binding import OPERATION_REFS, Binding, binding_for
from bke.core.secrets.signing import CommandSigner, sign_command
from bke.core.upgrade.run import SLUG_PREFIX as UPGRADE

NOW = datetime(2026, 1, 2, tzinfo=timezone.utc)
AGENT = "agent-1"


def _result(command_id: str, operation: OperationRef | None = None) -> CommandResult:
    return CommandResult(command_id=command_id, cluster="c1", node="n1", agent_id=AGENT, status="Succeeded", steps=[],
                         started_at=NOW.isoformat(), finished_at=NOW.isoformat(), operation=operation)


def test_the_legacy_slugs_are_the_operations_own_prefixes() -> None:
    assert dict(LEGACY_SLUGS) == {UPGRADE: OperationKind.UPGRADE, RESTORE: OperationKind.ETCD_RESTORE,
                                  ROTATION: OperationKind.ROTATION, RESET: OperationKind.RESET, JOIN: OperationKind.JOIN,
                                  REMOVAL: OperationKind.REMOVAL, "health@": OperationKind.HEALTH}


@pytest.mark.parametrize(("command_id", "kind"), [
    ("c1/upgrade@r1@workers/n1/0", OperationKind.UPGRADE),
    ("c1/restore@x1@etcd-data/n1/0", OperationKind.ETCD_RESTORE),
    ("c1/rotate@r2/n1/3", OperationKind.ROTATION),
    ("c1/health@7/n1/0", OperationKind.HEALTH),
    ("c1/command-key/n1/4", OperationKind.COMMAND_KEY),
    ("c1/node-env/n1/0", OperationKind.INSTALL),
])
def test_a_result_without_an_echoed_operation_is_routed_by_its_command_id(command_id: str, kind: OperationKind) -> None:
    ref = ref_of(_result(command_id))
    assert ref is not None and ref.kind == kind


@pytest.mark.parametrize("command_id", ["c1/upgrade@r1", "", "c1//n1/0", "a/b/c/d/e"])
def test_an_id_of_no_sender_s_form_names_no_operation(command_id: str) -> None:
    assert ref_of_command_id(command_id) is None


def test_the_echoed_operation_wins_over_what_the_id_looks_like() -> None:
    # an id that reads like an upgrade's, from a command that said it was a rotation's
    ref = OperationRef(kind=OperationKind.ROTATION, id="r2")
    assert ref_of(_result("c1/upgrade@r1@workers/n1/0", ref)) == ref
    assert owner(OperationKind.UPGRADE) == owner(OperationKind.ETCD_RESTORE) == "upgrader"
    assert owner(OperationKind.ROTATION) == owner(OperationKind.INSTALL) == "dispatcher"


def test_the_operation_is_signed_for_an_agent_that_reads_it_and_left_out_for_an_older_one() -> None:
    signer = CommandSigner.generate()
    ref = OperationRef(kind=OperationKind.UPGRADE, id="r1", step="workers")
    cmd = AgentCommand(command_id="c1/upgrade@r1@workers/n1/0", cluster="c1", node="n1", phase="upgrade:workers",
                       issued_at=NOW.isoformat(), steps=[], operation=ref)
    reads = binding_for(AGENT, "", OPERATION_REFS)
    older = binding_for(AGENT, "", OPERATION_REFS - 1)
    assert reads == older == Binding(AGENT, "")  # bound alike: only the body's form differs
    signed = sign_command(cmd, signer, binding=reads)
    assert signed.operation == ref and b'"operation"' in signed.signing_bytes()
    assert sign_command(cmd, signer, binding=older).operation is None
    assert b'"operation"' not in sign_command(cmd, signer, binding=None).to_bytes()  # unbound: an older agent


class _State:
    """What Inputs.result reads of the dispatcher's state for a believed result."""

    async def accepted_agent(self, cluster: str, node: str) -> str:
        return AGENT

    async def result_checks(self, cluster: str, node: str) -> tuple[str, None]:
        return AGENT, None

    async def results_checks(self, cluster: str, nodes: list[str], incarnation: bool) -> tuple[list[str], None]:
        return [AGENT] * len(nodes), None


class _Loop:
    def __init__(self, kind: OperationKind) -> None:
        self.kind, self.results = kind, []
        self.kick = lambda cluster: None

    def owns(self, ref: OperationRef) -> bool:
        return ref.kind == self.kind

    async def on_result(self, res: CommandResult) -> None:
        self.results.append(res.command_id)


def _inputs() -> tuple[Inputs, _Loop]:
    ops, rotation = Operations(), _Loop(OperationKind.ROTATION)
    ops.drive(rotation)  # type: ignore[arg-type]

    async def on_health(res: CommandResult) -> None:
        raise AssertionError("not a health round's")

    return Inputs(_State(), lambda cluster: None, lambda: NOW, on_health, ops), rotation  # type: ignore[arg-type]


async def test_the_dispatcher_sends_an_upgrade_s_answer_on_to_the_upgrader() -> None:
    inputs, rotation = _inputs()
    ref = OperationRef(kind=OperationKind.UPGRADE, id="r1", step="workers")
    for res, want in ((_result("c1/upgrade@r1@workers/n1/0", ref), ref),
                      # an agent of an earlier release: the id names the operation
                      (_result("c1/restore@x1@etcd-data/n1/0"), OperationRef(kind=OperationKind.ETCD_RESTORE,
                                                                               step="restore@x1@etcd-data"))):
        (out,) = await inputs.result(res)
        assert out.subject == NODE_COMMANDS_ANSWERED
        assert out.message == NodeCommandAnswered(operation=want, result=res) and not out.live  # stored, not live (answered.py)
    assert rotation.results == []


async def test_the_dispatcher_keeps_its_own_operations_answers_by_their_kind() -> None:
    inputs, rotation = _inputs()
    # an id that reads like an upgrade's, echoing a rotation: the rotation's
    res = _result("c1/upgrade@r1@workers/n1/0", OperationRef(kind=OperationKind.ROTATION, id="r2"))
    assert await inputs.result(res) == []
    assert rotation.results == [res.command_id]
