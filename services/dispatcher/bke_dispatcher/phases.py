"""The install pipeline as a data table. The CLI, the docs and `bke status` read it too.

Each phase names its summary (what `bke status` shows), its target nodes, the inputs it needs
before it can start, and how to build one node's steps; nothing else repeats any of it. Phases run in order; a phase whose `run_if` is false is Skipped.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from bke.contracts.agent_steps import Step, SystemdUnit
from bke.contracts.statuses import PhaseNeed
from bke.core.plan import NodePlan, Plan
from bke.core.plan.api_node import init_node
from bke.core.errors import TemporaryError
from bke.adapters.state.agent_keys import provisioned_seal_keys, sealer
from bke.core.state.nodefiles import NodeFile
from bke.adapters.state.nodefiles import RedisNodeFiles

from bke.core.node_steps import health_steps, node_env_steps, write_steps

__all__ = ["HEALTH", "PHASES", "Phase", "NodeInputs", "agent_sealers", "init_node", "phase_by_slug"]

CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
ETCD = ("etcd-data", "etcd-events", "etcd-pods")
HEALTH = (*ETCD, *CONTROL_PLANE, "kubelet")  # what the health phase (and the periodic health) checks per node
HEALTH_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class NodeInputs:
    """What a step builder may read for one node: nothing else, so builders stay pure."""

    render: list[NodeFile]
    certs: list[NodeFile]
    checksums: dict[str, str]
    held_ports: tuple[int, ...] = ()  # a node joining again: what its running parts listen on
    # seals to the node's provisioned agent key (phases that need "agent-keys": a secret file)
    seal: Callable[[bytes], bytes] | None = None


async def agent_sealers(files: RedisNodeFiles, cluster: str, names: list[str]) -> dict[str, Callable[[bytes], bytes] | None]:
    """For a phase that needs "agent-keys": each node's sealer (its provisioned agent key). A
    node without one cannot get its secret file: TemporaryError, the runner comes back (a
    node's bundle is sealed to the same key before the certs phase, so it is there by then)."""
    keys = await provisioned_seal_keys(files.redis, cluster, names)
    missing = [h for h, k in keys.items() if k is None]
    if missing:
        raise TemporaryError(f"no agent key provisioned for {', '.join(missing[:5])}: its secret files cannot be "
                             "sealed to it", delay=5.0)
    return {h: sealer(k) for h, k in keys.items() if k is not None}


@dataclass(frozen=True)
class Phase:
    slug: str
    summary: str  # shown by `bke status` and the docs
    targets: Callable[[Plan], list[NodePlan]]
    build: Callable[[Plan, NodePlan, NodeInputs], list[Step]] | None = None
    needs: tuple[PhaseNeed, ...] = ()
    run_if: Callable[[Plan], bool] = field(default=lambda plan: True)
    concurrency: int | None = None  # commands in flight at once; None = every target
    local: str | None = None  # work the dispatcher does itself ("addons"), after the targets' commands if any


def _all(plan: Plan) -> list[NodePlan]:
    return list(plan.nodes)


def _running(*components: str) -> Callable[[Plan], list[NodePlan]]:
    return lambda plan: [n for n in plan.nodes if any(c in n.components for c in components)]


def _joiners(plan: Plan) -> list[NodePlan]:
    first = init_node(plan).hostname
    return [n for n in _running(*CONTROL_PLANE)(plan) if n.hostname != first]


def _workers(plan: Plan) -> list[NodePlan]:
    return [n for n in plan.nodes if n.registers and not any(c in n.components for c in CONTROL_PLANE)]


def _control_plane(plan: Plan, node: NodePlan, inp: NodeInputs) -> list[Step]:
    return [*write_steps(inp.render, "control-plane"), *health_steps(plan, node, CONTROL_PLANE, HEALTH_TIMEOUT_S)]


PHASES: tuple[Phase, ...] = (
    Phase("agents", "every node's agent is up and has announced its keys", _all, needs=(PhaseNeed.AGENTS,)),
    Phase(
        "node-env",
        "preflight checks; containerd, runc, kubelet (and on registered nodes crictl, kubectl, CNI plugins) fetched and verified; kernel modules, sysctls, swap off; kubelet running",
        _all,
        lambda plan, node, inp: node_env_steps(plan, node, inp.render, inp.checksums, inp.held_ports),
        needs=(PhaseNeed.RENDER, PhaseNeed.CHECKSUMS),
    ),
    Phase(
        "certs",
        "each node receives exactly its own certificates and keys, sealed to its agent",
        _all,
        lambda plan, node, inp: write_steps(inp.certs, "certs", "cert"),
        needs=(PhaseNeed.CERTS,),
    ),
    Phase(
        "load-balancer",
        "haproxy + keepalived static pods for a VIP endpoint, haproxy waited healthy",
        _running("haproxy", "keepalived"),
        # haproxy's monitor answers once it runs its configuration, before any apiserver exists;
        # without this wait a haproxy that cannot start was first seen as an endpoint refusing
        # the addons' connections, after every control-plane phase had succeeded
        lambda plan, node, inp: [*write_steps(inp.render, "load-balancer", seal=inp.seal),
                                 *health_steps(plan, node, ("haproxy",), HEALTH_TIMEOUT_S)],
        # keepalived.conf (the VRRP password) sealed to each master's agent
        needs=(PhaseNeed.RENDER, PhaseNeed.AGENT_KEYS),
        run_if=lambda plan: plan.load_balancer,
    ),
    Phase(
        "etcd",
        "every etcd cluster's members started and waited healthy, before any apiserver",
        _running(*ETCD),
        lambda plan, node, inp: [*write_steps(inp.render, "etcd"), *health_steps(plan, node, ETCD, HEALTH_TIMEOUT_S)],
        needs=(PhaseNeed.RENDER,),
    ),
    Phase(
        "control-plane-init",
        "the first control-plane node's components, waited healthy",
        lambda plan: [init_node(plan)],
        _control_plane,
        needs=(PhaseNeed.RENDER,),
    ),
    Phase("control-plane-join", "the other control-plane nodes", _joiners, _control_plane, needs=(PhaseNeed.RENDER,)),
    Phase(
        "workers",
        "worker kubelets restarted with their credentials, in bounded batches",
        _workers,
        lambda plan, node, inp: [SystemdUnit(id="systemd:kubelet", unit="kubelet.service", action="restart")],
        concurrency=1000,
    ),
    Phase("addons", "bootstrap RBAC, kube-proxy, the CNI (waited ready), CoreDNS, then user addons, in order",
          lambda plan: [], local="addons"),
    Phase(
        "node-labels",
        "every registered node's labels and taints applied through the API (recorded in the lab)",
        lambda plan: [],
        local="node-labels",
    ),
    Phase(
        "health",
        "every node's kubelet, etcd members and control-plane endpoints answer; then, through the API "
        "(not in the lab), every registered node Ready and the CNI and CoreDNS workloads ready",
        _all,
        lambda plan, node, inp: health_steps(plan, node, HEALTH, 60.0),
        concurrency=1000,
        local="health",  # after every node answered: the API checks
    ),
)


def phase_by_slug(slug: str) -> Phase:
    for p in PHASES:
        if p.slug == slug:
            return p
    raise KeyError(slug)
