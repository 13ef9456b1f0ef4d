"""What each upgrade step sends one node: pure, from the old and new render of that node.

Every file an upgrade changes goes through the agent's `ReplaceFiles` step (backup, write,
restart, probes, rollback): never a tag swapped in place. A step carries only the files of its
component that differ between the current and the target render, so a step whose component did
not change on a node sends nothing that restarts it.

Which file belongs to which step:
- etcd/<cluster>: that etcd cluster's manifest; the probe is the member's /health, which answers
  true only while its cluster has a leader (etcd server/etcdserver/api/etcdhttp/health.go), so a
  member that comes back healthy also proves its cluster kept quorum;
- kube-apiserver, kube-controller-manager, kube-scheduler: the component's manifest, probed on
  its own health endpoint (node_steps.health_steps);
- masters-runtime / workers: everything else of the node environment (containerd and kubelet
  configuration, units) and the binaries whose URL changed (a new version is a new URL), then
  containerd and the kubelet are restarted and the kubelet's /healthz waited for.
- load-balancer (a changed spec's, never an upgrade's: nothing in these files depends on the
  versions): haproxy's and keepalived's files where they change (a master joined or left:
  backends, VRRP peers and priorities), keepalived.conf sealed to the node's agent (it holds the
  cluster's VRRP password), haproxy probed on its monitor URI; on a master that leaves, its
  keepalived manifest then haproxy's taken away, so the VIP moves to a master that stays before
  its haproxy stops.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from bke.contracts.agent_steps import (
    CheckHost,
    HealthProbe,
    LeaveEtcdMember,
    NewFile,
    RemoveFile,
    ReplaceFiles,
    Step,
    SystemdUnit,
    UpdateAgent,
    WaitHealth,
)
from bke.core.node_steps import artefacts_of, file_phase, health_steps
from bke.core.pki.instances import node_file_refs
from bke.core.plan import NodePlan, Plan
from bke.core.render.layout import HAPROXY_CFG, KEEPALIVED_CHECK, KEEPALIVED_CONF
from bke.core.render.result import RenderedFile

from .steps import StepKind, step_kind

__all__ = [
    "COMPONENT_TIMEOUT_S",
    "NODE_COMMANDS",
    "BinariesMemo",
    "changed_files",
    "node_upgrade_steps",
    "stops_registering",
]

MANIFESTS = "/etc/kubernetes/manifests"
COMPONENT_TIMEOUT_S = 180.0  # a new static pod: image pull, start, first healthy answer
RUNTIME_EXTRA_S = 120.0  # a runtime replacement also downloads binaries and restarts two units
POST_CHECK_TIMEOUT_S = 120.0
LB_STEP = StepKind.LOAD_BALANCER
# keepalived's pod first: stopping, it gives the VIP up (a priority-0 advert) while haproxy
# still answers on this master
LB_PODS = ("keepalived", "haproxy")
# then their configuration (keepalived.conf holds the VRRP password)
LB_FILES = (KEEPALIVED_CONF, KEEPALIVED_CHECK, HAPROXY_CFG)
CLEANUP_STEP = StepKind.CLEANUP
ALL_COMPONENTS = ("kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
RUNTIME_UNITS = ("containerd.service", "kubelet.service")


def changed_files(old: Mapping[str, RenderedFile], new: Mapping[str, RenderedFile]) -> list[RenderedFile]:
    """The new render's files whose bytes or mode differ from the current render (or are new)."""
    out = []
    for path, f in sorted(new.items()):
        before = old.get(path)
        if before is None or before.content != f.content or before.mode != f.mode:
            out.append(f)
    return out


Seal = Callable[[bytes], bytes]  # clear bytes -> sealed to the receiving node's agent (bke.core.secrets.sealing)


def _new_file(f: RenderedFile, seal: Seal | None = None) -> NewFile:
    if f.secret:  # never inline a secret: sealed to the node's agent, or not sent at all
        if seal is None:
            raise ValueError(f"{f.path}: a secret file is sent only sealed to its node's agent")
        return NewFile(path=f.path, mode=f.mode, sealed_b64=base64.b64encode(seal(f.content)).decode(), sha256=f.sha256)
    return NewFile(path=f.path, mode=f.mode, content_b64=base64.b64encode(f.content).decode(), sha256=f.sha256)


def _load_balancer(n: "_NodeStep") -> list[Step]:
    old_plan, new_plan, hostname = n.old_plan, n.new_plan, n.hostname
    node = new_plan.node_index[1].get(hostname)
    if node is None or not (node.runs("keepalived") or node.runs("haproxy")):
        # a master that leaves or stops being one: its load balancer stops, then its
        # configuration goes (keepalived.conf holds the cluster's VRRP password)
        old = old_plan.node(hostname)
        out: list[Step] = [RemoveFile(id=f"remove:{c}", path=f"{MANIFESTS}/{c}.yaml") for c in LB_PODS if old.runs(c)]
        return out + [RemoveFile(id=f"remove:{p}", path=p) for p in LB_FILES]
    files = [_new_file(f, n.seal) for f in n.changed if file_phase(f.path) == "load-balancer"]
    return _replace("replace:load-balancer", files, [], _probes(new_plan, node, ("haproxy",)), n.timeout_s)


def _probes(plan: Plan, node: NodePlan, components: tuple[str, ...]) -> list[HealthProbe]:
    out = []
    for s in health_steps(plan, node, components, COMPONENT_TIMEOUT_S):
        assert isinstance(s, WaitHealth)
        out.append(HealthProbe(url=s.url, tls=s.tls, expect_status=s.expect_status, expect_body=s.expect_body))
    return out


BinariesMemo = dict[tuple[str, bool, str, bool], tuple[NewFile, ...]]


def _binaries(old_plan: Plan, new_plan: Plan, node: NodePlan, sums: Mapping[str, str],
              memo: BinariesMemo | None = None) -> list[NewFile]:
    old_node = old_plan.node(node.hostname)
    # a node's artefacts are its spec's, its arch's and whether it registers (node_steps.
    # artefacts_of): every node of the same kind gets the same list, so one list per kind is
    # enough for a whole batch (at 5,000 nodes, both plans' artefacts per node were a third of
    # the commands' build time). The memo is valid for one (old plan, new plan, sums) only.
    key = (old_node.arch, old_node.registers, node.arch, node.registers)
    if memo is not None and key in memo:
        return list(memo[key])
    repo_old, repo_new = old_plan.spec.config.http_repo, new_plan.spec.config.http_repo
    before = {a.key: a.url(repo_old) for a in artefacts_of(old_plan, old_node)}
    out = []
    for a in artefacts_of(new_plan, node):
        url = a.url(repo_new)
        if before.get(a.key) == url:
            continue
        assert a.dest is not None, f"{a.path} has no place on a node"
        out.append(NewFile(path=a.dest, mode=a.mode, url=url, sha256=sums[url]))
    if memo is not None:
        memo[key] = tuple(out)  # NewFile is frozen: the same objects may sit in many commands
    return out


@dataclass(frozen=True)
class _NodeStep:
    """One node's side of one step: what `node_upgrade_steps` was given, and the files that changed."""

    step: str
    group: str
    old_plan: Plan
    new_plan: Plan
    hostname: str
    old_files: Mapping[str, RenderedFile]
    new_files: Mapping[str, RenderedFile]
    changed: list[RenderedFile]
    sums: Mapping[str, str]
    timeout_s: float
    certs: Sequence[NewFile]
    update: UpdateAgent | None
    binaries_memo: BinariesMemo | None
    seal: Seal | None

    @property
    def node(self) -> NodePlan:
        """The node in the new plan (a master that leaves has none: the load-balancer step's)."""
        return self.new_plan.node(self.hostname)


def node_upgrade_steps(
    step: str,
    group: str,
    old_plan: Plan,
    new_plan: Plan,
    hostname: str,
    old_files: Mapping[str, RenderedFile],
    new_files: Mapping[str, RenderedFile],
    sums: Mapping[str, str],
    component_timeout_s: float = COMPONENT_TIMEOUT_S,
    certs: Sequence[NewFile] = (),
    update: UpdateAgent | None = None,
    binaries_memo: BinariesMemo | None = None,
    seal: Seal | None = None,
) -> list[Step]:
    """The agent steps of upgrade step `step` for one node (empty when nothing changes), by the
    step's row of `NODE_COMMANDS`. `component_timeout_s`: how long a replaced static pod has to
    answer healthy before it is rolled back (the lab, whose pods start in a second, uses less).
    `certs`: this step's renewed certificate files for the node (sealed to its agent;
    bke.core.upgrade.certificates), replaced in the same step as the manifest so that a rollback
    restores both. `update`: the agents step's new agent release (the old agent installs it and
    restarts; the new one answers the same command, so its answer carries the new version).
    `binaries_memo`: a dict the caller keeps for the nodes of one call site with the same plans
    and `sums` (a batch), so that each kind of node's changed binaries are worked out once.
    `seal`: seals a secret file to this node's agent (the load-balancer step's keepalived.conf);
    without it a secret file is refused."""
    kind = step_kind(step)
    build = NODE_COMMANDS.get(kind) if kind is not None else None
    if build is None:
        raise ValueError(f"upgrade step {step!r} sends no node command")
    if certs and step not in _CARRY_CERTS and step not in (LB_STEP, CLEANUP_STEP):
        raise ValueError(f"upgrade step {step!r} carries no certificate")
    return build(_NodeStep(step, group, old_plan, new_plan, hostname, old_files, new_files,
                           changed_files(old_files, new_files), sums, component_timeout_s, certs, update,
                           binaries_memo, seal))


def _agents(n: _NodeStep) -> list[Step]:
    # every agent answers (and so proves it runs and takes signed commands) with the disk check
    # the new binaries need; with a release, after it runs the new agent
    return [*([n.update] if n.update is not None else []), CheckHost(id="agents:disk", checks=["disk"])]


def _etcd(n: _NodeStep) -> list[Step]:
    cluster = n.new_plan.etcd_cluster(n.group)
    if cluster is None:
        raise ValueError(f"etcd cluster {n.group!r} is not in the plan")
    path = f"{MANIFESTS}/{cluster.manifest}"
    files = [_new_file(f) for f in n.changed if f.path == path] + list(n.certs)
    return _replace(f"replace:{n.group}", files, [], _probes(n.new_plan, n.node, (n.group,)), n.timeout_s)


def _static_pod(n: _NodeStep) -> list[Step]:
    path = f"{MANIFESTS}/{n.step}.yaml"
    if path in n.old_files and path not in n.new_files:
        # the component moved off this master (a changed spec, bke.core.lifecycle.apply_run): its
        # manifest taken away, the kubelet stops the static pod (as `kubeadm reset` does)
        return [RemoveFile(id=f"remove:{n.step}", path=path)]
    files = [_new_file(f) for f in n.changed if f.path == path] + list(n.certs)
    return _replace(f"replace:{n.step}", files, [], _probes(n.new_plan, n.node, (n.step,)), n.timeout_s)


def _runtime(n: _NodeStep) -> list[Step]:
    files = [_new_file(f) for f in n.changed if file_phase(f.path) == "node-env"]
    files += _binaries(n.old_plan, n.new_plan, n.node, n.sums, n.binaries_memo)
    files += n.certs
    return _replace("replace:runtime", files, list(RUNTIME_UNITS), _probes(n.new_plan, n.node, ("kubelet",)),
                    n.timeout_s + RUNTIME_EXTRA_S)


def _post_checks(n: _NodeStep) -> list[Step]:
    components = tuple(c.name for c in n.new_plan.etcd_clusters) + ALL_COMPONENTS
    return list(health_steps(n.new_plan, n.node, components, POST_CHECK_TIMEOUT_S))


def stops_registering(old_plan: Plan, new_plan: Plan, hostname: str) -> bool:
    """The node's kubelet registered a Node in the old plan and runs standalone in the new (a
    worker becoming etcd-only): drained, never uncordoned, its Node object deleted."""
    was = old_plan.node_index[1].get(hostname)
    return was is not None and was.registers and not new_plan.node(hostname).registers


def _cleanup(n: _NodeStep) -> list[Step]:
    """What a node that runs less in place no longer needs: first each etcd member it stopped
    being (its cluster removed it in the membership steps before: its pod, then its data), then
    the rendered files its new render no longer has (crictl's configuration and the pod
    network's sysctls on a node whose kubelet stopped registering; static pod manifests are
    their own steps' to take away), then the certificates, keys and kubeconfigs it held in the
    old plan and not in the new (a master that became a worker, a member that left, a kubelet
    that stopped registering: bke.core.pki's placement rules, least privilege)."""
    old_plan, new_plan, hostname, timeout_s = n.old_plan, n.new_plan, n.hostname, n.timeout_s
    left = [c for c in old_plan.etcd_clusters
            if c.member(hostname) is not None and (after := new_plan.etcd_cluster(c.name)) is not None and after.member(hostname) is None]
    out: list[Step] = [LeaveEtcdMember(id=f"leave:{c.name}", manifest=f"{MANIFESTS}/{c.manifest}", data_dir=c.data_dir,
                                       timeout_s=timeout_s) for c in left]
    rendered = sorted(p for p in n.old_files.keys() - n.new_files.keys() if not p.startswith(f"{MANIFESTS}/"))
    keep = {r.path for r in node_file_refs(new_plan, (hostname,))[hostname]}
    gone = sorted({r.path for r in node_file_refs(old_plan, (hostname,))[hostname]} - keep - set(rendered))
    out += [RemoveFile(id=f"remove:{p}", path=p) for p in (*rendered, *gone)]
    if stops_registering(old_plan, new_plan, hostname):
        # its kubelet stops registering: restarted on its standalone configuration before its
        # Node object is deleted (a join that wrote that configuration does not restart a
        # running kubelet, and a kubelet still holding kubelet.conf would register it again)
        out += [SystemdUnit(id="cleanup:kubelet", unit="kubelet.service", action="restart"),
                *health_steps(new_plan, new_plan.node(hostname), ("kubelet",), timeout_s)]
    return out


def _replace(step_id: str, files: list[NewFile], units: list[str], probes: list[HealthProbe],
             timeout_s: float = COMPONENT_TIMEOUT_S) -> list[Step]:
    if not files:
        # nothing of this component changes on this node: only check that it is healthy
        return [WaitHealth(id=f"health:{i}", url=p.url, tls=p.tls, expect_status=p.expect_status,
                           expect_body=p.expect_body, timeout_s=timeout_s) for i, p in enumerate(probes)]
    return [ReplaceFiles(id=step_id, files=files, restart_units=units, probes=probes, timeout_s=timeout_s)]


# step -> how one node's commands of it are built
NODE_COMMANDS: dict[StepKind, Callable[[_NodeStep], list[Step]]] = {
    StepKind.AGENTS: _agents,
    StepKind.ETCD: _etcd,
    StepKind.KUBE_APISERVER: _static_pod,
    StepKind.KUBE_CONTROLLER_MANAGER: _static_pod,
    StepKind.KUBE_SCHEDULER: _static_pod,
    StepKind.LOAD_BALANCER: _load_balancer,
    StepKind.MASTERS_RUNTIME: _runtime,
    StepKind.WORKERS: _runtime,
    StepKind.CLEANUP: _cleanup,
    StepKind.POST_CHECKS: _post_checks,
}
# the steps whose ReplaceFiles carries the node's renewed certificates with the component's files
_CARRY_CERTS = frozenset({StepKind.ETCD, StepKind.KUBE_APISERVER, StepKind.KUBE_CONTROLLER_MANAGER,
                          StepKind.KUBE_SCHEDULER, StepKind.MASTERS_RUNTIME})
