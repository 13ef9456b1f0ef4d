"""bke.core.host_actions held against what the senders send: every command the dispatcher (install
and join phases, health rounds, rotations, resets, removals) and the upgrader (upgrade and apply
steps, etcd restores) builds, under the command id its sender gives it, for the example
clusters, passes the agent's check; every row of the table is used by some sender (no row
allows what nobody sends); and the same commands under another operation's id are refused."""
from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import PurePosixPath

import pytest

from bke.adapters.checksums import artefact_urls
from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import (
    AgentWheel,
    FetchFile,
    RemoveFile,
    ReplaceFiles,
    RunProgram,
    Step,
    SystemdUnit,
    UpdateAgent,
    WriteFile,
)
from bke.core.etcdsnap.restore import STAGES, node_steps as restore_steps, restore_plan
from bke.core.etcdsnap.step import snapshot_step
from bke.core.host_actions import HOST_ACTIONS, command_kind, command_refusal, file_class
from bke.core.etcdsnap.restore_run import restore_command_id
from bke.core.host_actions.table import AGENT_TARGET, DAEMON_RELOAD, INSTALL_KINDS, LIMITED_BY_TARGETS, target_matches
from bke.core.lifecycle.apply_run import MEMBER_NODE_STEPS, apply_order, member_commands
from bke.core.lifecycle.diff import diff_plans, render_diff
from bke.core.pki import node_file_refs
from bke.core.pki.table import leaf_rows
from bke.core.plan import Plan, plan_spec_text
from bke.core.render import RenderInputs, render_cluster
from bke.core.secrets.command_key_rollover import Rollover, announcement, retirement
from bke.core.state.nodefiles import NodeFile
from bke.core.upgrade import Change, expand_order, resolve_target
from bke.core.upgrade.certificates import cert_files, renewed_instances
from bke.core.upgrade.node_commands import node_upgrade_steps
from bke.core.upgrade.run import LOCAL_STEPS, upgrade_command_id
from bke.core.upgrade.target_plan import target_plan
from bke_dispatcher.health import HEALTH_COMPONENTS
from bke_dispatcher.command_ids import command_id
from bke_dispatcher.phases import PHASES, NodeInputs
from bke_dispatcher.ops.join.decide import join_slug
from bke_dispatcher.ops.removal.decide import removal_slug
from bke_dispatcher.ops.reset.decide import NodeRun as ResetRun, reset_slug, reset_step
from bke_dispatcher.ops.rotation.decide import new_rotation, node_steps as rotation_steps, rotation_slug
from bke.core.node_steps import health_steps

from tests.unit.planner.test_apply_run import ETCD_ONLY, SWAP_ETCD, _node, _without
from tests.unit.dispatcher.test_rotation_decision import renewed
from ..upgrade_helpers import SEED, SPLIT, plan_of

NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)
Sent = tuple[str, str, list[Step]]  # (command id, phase, steps) of one command, as its sender names it


def _plan(text: str) -> Plan:
    out = plan_spec_text(text, "t")
    assert out.plan is not None, out.errors
    return out.plan


def _rendered(plan: Plan, vrrp: str = "x" * 8) -> dict[str, dict[str, object]]:
    return {n.hostname: {f.path: f for f in n.files} for n in render_cluster(plan, RenderInputs(vrrp_password=vrrp)).nodes}


def _node_files(rendered: dict[str, object]) -> list[NodeFile]:
    return [NodeFile(path=f.path, mode=f.mode, sha256=hashlib.sha256(f.content).hexdigest(),  # type: ignore[attr-defined]
                     content_b64=base64.b64encode(f.content).decode()) for f in rendered.values()]  # type: ignore[attr-defined]


def _certs(plan: Plan, host: str) -> list[NodeFile]:
    """A node's file set as the certs service stores it (secret files sealed: a stand-in)."""
    out = []
    for ref in node_file_refs(plan, [host])[host]:
        data = f"{ref.instance}:{ref.part}".encode()
        b64 = base64.b64encode(data).decode()
        out.append(NodeFile(path=ref.path, mode=ref.mode, sha256=hashlib.sha256(data).hexdigest(),
                            **({"sealed_b64": b64} if ref.secret else {"content_b64": b64})))
    return out


def install(plan: Plan) -> Iterator[Sent]:
    """The install phases, the same phases under a join's id, and a health round."""
    rendered = _rendered(plan)
    sums = {u: "0" * 64 for u in artefact_urls(plan)}
    for phase in PHASES:
        for node in phase.targets(plan) if phase.build else ():
            inp = NodeInputs(render=_node_files(rendered[node.hostname]), certs=_certs(plan, node.hostname),
                             checksums=sums, seal=lambda b: b)
            steps = phase.build(plan, node, inp)
            yield command_id("c", phase.slug, node.hostname, 0), phase.slug, steps
            yield command_id("c", join_slug("j1"), node.hostname, 3), phase.slug, steps
    for node in plan.nodes:  # bke_dispatcher.health's ids
        yield f"c/health@7/{node.hostname}/0", "health", health_steps(plan, node, HEALTH_COMPONENTS, 10.0)


def day2(plan: Plan) -> Iterator[Sent]:
    """A rotation of every certificate, a reset and a delete (snapshots first), a removal."""
    rot = new_rotation(renewed(plan, *{r.name for r in leaf_rows()}), plan, "t")
    for run in rot.nodes:
        yield (command_id("c", rotation_slug("r1"), run.hostname, 0), rotation_slug("r1"),
               rotation_steps(plan, plan.node(run.hostname), run, _certs(plan, run.hostname)))
    for i, c in enumerate(plan.etcd_clusters):
        host = c.members[0].hostname
        yield command_id("c", reset_slug("r1"), host, 1 + i), reset_slug("r1"), [snapshot_step(plan, c.name, host, "k" * 44, NOW, "r1")]
    for delete in (False, True):
        yield (command_id("c", reset_slug("r1"), "h", 0), reset_slug("r1"),
               [reset_step(ResetRun(hostname="h", rank=2, etcd_data_dirs=["/var/lib/etcd"]), delete)])
    yield command_id("c", removal_slug("r1"), "h", 0), removal_slug("r1"), [reset_step(ResetRun(hostname="h", rank=0), True)]
    for c in plan.etcd_clusters:
        rp = restore_plan(plan, c.name, "s1")
        for stage in STAGES:
            for host in rp.nodes(stage):
                yield (restore_command_id("c", "r1", stage.name, host), f"etcd-restore:{stage.name}",
                       restore_steps(plan, rp, stage.name, host, restore_id="r1", sha256="0" * 64, size=1, timeout_s=60))


def operation(old: Plan, new: Plan, steps, *, vrrp: tuple[str, str] = ("x" * 8, "x" * 8), renew: bool = False) -> Iterator[Sent]:
    """The upgrader's node commands for these expanded steps, as operation._send builds them."""
    old_r, new_r = _rendered(old, vrrp[0]), _rendered(new, vrrp[1])
    sums = {u: "0" * 64 for u in {*artefact_urls(old), *artefact_urls(new)}}
    renewed_ids = renewed_instances(old, steps) if renew else []
    update = UpdateAgent(id="agents:update", version="9.9.9", wheels=[AgentWheel(url="http://repo/a.whl", sha256="0" * 64)])
    for st in steps:
        if st.step in LOCAL_STEPS:
            continue
        for host in (h for batch in st.batches for h in batch):
            if st.step == "etcd-snapshots":
                out: list[Step] = [snapshot_step(old, st.group, host, "k" * 44, NOW, "r1")]
            elif st.step in MEMBER_NODE_STEPS:
                out = member_commands(st.step, st.group, old, new, host, 60.0)
            else:
                certs = cert_files(old, st.step, st.group, host, renewed_ids, _certs(old, host)) if renewed_ids else []
                out = node_upgrade_steps(st.step, st.group, old, new, host, old_r.get(host, {}), new_r.get(host, {}),
                                         sums, certs=certs, update=update if st.step == "agents" else None,
                                         seal=lambda b: b)
            yield upgrade_command_id("c", "r1", st.step, st.group, host), f"upgrade:{st.step}", out


def upgrade(example) -> Iterator[Sent]:
    old = plan_of(example)
    target = resolve_target(old, "1.34.1", "3.5.21", containerd="2.1.4")
    new = target_plan(old, target)
    change = Change(kubernetes=True, etcd=True, containerd=True, certificates=True)
    yield from operation(old, new, expand_order(old, change), renew=True)


def unchanged(example) -> Iterator[Sent]:
    """An upgrade whose steps change nothing on a node: each sends the component's probes only."""
    plan = plan_of(example)
    yield from operation(plan, plan, expand_order(plan, Change(kubernetes=True, etcd=True, containerd=True)))
    rendered = _rendered(plan)
    for node in plan.nodes:  # a load balancer whose files stay (an apply's), the post-checks
        for step in ("load-balancer", "post-checks") if node.runs("haproxy") else ("post-checks",):
            files = rendered.get(node.hostname, {})
            yield (upgrade_command_id("c", "r1", step, "", node.hostname), f"upgrade:{step}",
                   node_upgrade_steps(step, "", plan, plan, node.hostname, files, files, {}))


def moved_off(example) -> Iterator[Sent]:
    """A control-plane component moved off a master (a changed spec): its manifest taken away."""
    plan = plan_of(example)
    rendered = _rendered(plan)
    for host, files in rendered.items():
        for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            path = f"/etc/kubernetes/manifests/{c}.yaml"
            if path in files:
                steps = node_upgrade_steps(c, "", plan, plan, host, files, {p: f for p, f in files.items() if p != path},
                                           {})
                yield upgrade_command_id("c", "r1", c, "", host), f"upgrade:{c}", steps


def apply(old_text: str, new_text: str, **kw) -> Iterator[Sent]:
    old, new = _plan(old_text), _plan(new_text)
    order = apply_order(old, new, diff_plans(old, new, render_diff(old, new)))
    assert not order.refusals, order.refusals
    yield from operation(old, new, order.steps, **kw)


SEED_TEXT, SPLIT_TEXT = SEED.read_text(), SPLIT.read_text()
def command_key_rollover() -> list[Sent]:
    """The dispatcher's announcement of a next command key and the retire of the old one
    (bke.core.secrets.command_key_rollover), to one node."""
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    roll = Rollover("bke-command-ed25519 " + "A" * 43 + "=", "00000000000000ab", "00000000000000aa", at + timedelta(days=1), at)
    cmds = [announcement(roll, "c", "m1", at), retirement(roll.next_public_line, roll.next_key_id, "c", "m1", at)]
    return [(c.command_id, c.phase, list(c.steps)) for c in cmds]


SCENARIOS = {
    "install seed": lambda: install(plan_of(SEED)),
    "install split": lambda: install(plan_of(SPLIT)),
    "day-2 seed": lambda: day2(plan_of(SEED)),
    "day-2 split": lambda: day2(plan_of(SPLIT)),
    "upgrade seed": lambda: upgrade(SEED),
    "upgrade split": lambda: upgrade(SPLIT),
    "upgrade: nothing changes on the nodes": lambda: unchanged(SPLIT),
    "apply: the control plane moves off a master": lambda: moved_off(SPLIT),
    "apply: a master joins (load balancers roll)": lambda: apply(SPLIT_TEXT, SPLIT_TEXT + _node("m6", "127.0.20.6", "[master, apiserver]")),
    "apply: a master leaves (its load balancer goes)": lambda: apply(SPLIT_TEXT, _without(SPLIT_TEXT, "big-m3")),
    "apply: an etcd member moves": lambda: apply(SEED_TEXT, SWAP_ETCD),
    "apply: a worker becomes etcd-only": lambda: apply(SWAP_ETCD, ETCD_ONLY),
    "apply: the VRRP password changes": lambda: apply(SPLIT_TEXT, SPLIT_TEXT.replace("max-requests-inflight: \"800\"",
                                                                                     "max-requests-inflight: \"900\""),
                                                      vrrp=("x" * 8, "y" * 8)),
    "command-key rollover": command_key_rollover,
}


@pytest.fixture(scope="module")
def sent() -> dict[str, list[Sent]]:
    return {name: list(make()) for name, make in SCENARIOS.items()}


def test_every_command_a_sender_builds_passes_the_agents_check(sent: dict[str, list[Sent]]) -> None:
    refused = []
    for name, commands in sent.items():
        for cid, phase, steps in commands:
            if why := command_refusal(_command(cid, phase, steps)):
                refused.append(f"{name}: {phase}: {why}")
    assert not refused, "\n".join(refused[:20])


def _command(cid: str, phase: str, steps: list[Step]) -> AgentCommand:
    return AgentCommand(command_id=cid, cluster="c", node=cid.split("/")[2], phase=phase, issued_at="t", steps=steps)


def test_install_kinds_are_the_install_phases_that_send_commands() -> None:
    assert set(INSTALL_KINDS) == {p.slug for p in PHASES if p.build is not None}


def test_a_senders_command_under_another_operations_id_is_refused(sent: dict[str, list[Sent]]) -> None:
    """Each command (one in seven), relabelled with the phase another operation sends (its steps
    and id kept), is refused for its id; and so is each under an id that names another node."""
    commands = [c for cs in sent.values() for c in cs]
    operation = {cid: cid.split("/")[1].partition("@")[0] for cid, _, _ in commands}
    phases = {operation[cid]: phase for cid, phase, _ in commands}  # one phase each operation sends
    assert {"node-env", "join", "health", "rotate", "reset", "remove", "upgrade", "restore"} <= phases.keys()
    for cid, phase, steps in commands[::7]:
        for other_phase in phases.values():
            if other_phase == phase or (operation[cid] == "join" and other_phase in INSTALL_KINDS):
                continue  # a join sends any of the install's phases
            why = command_refusal(_command(cid, other_phase, steps))
            assert why is not None and "bke.core.host_actions.origins" in why, (cid, other_phase, why)
        node = cid.split("/")[2]
        moved = AgentCommand(command_id=cid.replace(f"/{node}/", "/elsewhere/"), cluster="c", node=node, phase=phase,
                             issued_at="t", steps=steps)
        assert "names another cluster or node" in (command_refusal(moved) or ""), cid


def _uses(kind: str, step: Step) -> Iterator[tuple[str, str, str]]:
    """(kind, action, target) of each thing `step` does that the table limits."""
    if step.type not in LIMITED_BY_TARGETS:
        yield kind, "step", step.type
    if isinstance(step, RemoveFile):
        yield kind, f"remove:{file_class(step.path)}", step.path
    elif isinstance(step, (WriteFile, FetchFile)):
        yield kind, file_class(step.path, bool(step.mode & 0o111)), step.path
    elif isinstance(step, ReplaceFiles):
        yield from ((kind, file_class(f.path, bool(f.mode & 0o111)), f.path) for f in step.files)
        yield from ((kind, "service", u) for u in step.restart_units)
    elif isinstance(step, RunProgram):
        yield kind, "program", PurePosixPath(step.argv[0]).name
    elif isinstance(step, SystemdUnit):
        yield kind, "service", DAEMON_RELOAD if step.action == "daemon-reload" else step.unit
    elif isinstance(step, UpdateAgent):
        yield kind, "agent", AGENT_TARGET


def test_every_row_of_the_table_is_used_by_a_sender(sent: dict[str, list[Sent]]) -> None:
    used = {u for commands in sent.values() for _, phase, steps in commands for s in steps
            for u in _uses(command_kind(phase), s)}
    unused = []
    for row in HOST_ACTIONS:
        for kind in row.kinds:
            if not any(k == kind and a == row.action and target_matches(t, row.targets) for k, a, t in used):
                unused.append(f"{kind} {row.action} {row.targets}")
    # a worker's runtime step sends its unit or kernel files only when its render changes them
    # (a changed kubelet flag or sysctl), which no scenario here does (a master's does, above)
    allowed_unused = {"upgrade:workers unit", "upgrade:workers kernel"}
    assert [u for u in unused if " ".join(u.split()[:2]) not in allowed_unused] == []
