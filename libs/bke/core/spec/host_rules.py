"""What a spec asks of its hosts that only the host can tell: whether the kubelet will demand
cgroup v2. Read by the dispatcher (the preflight `cgroup` check of node-env) and by spec
validation (a warning when a spec opts out)."""
from __future__ import annotations

import weakref

from bke.core import versions
from bke.core.flagrules import go_bool
from .models import ClusterSpec

__all__ = ["FAIL_CGROUPV1", "cgroup_opt_out_warnings", "kubelet_args", "requires_cgroup_v2"]

# The kubelet flag for KubeletConfiguration.failCgroupV1 (KEP-4569, kubernetes PR 126031, 1.31+).
FAIL_CGROUPV1 = "fail-cgroupv1"


# id(spec) -> (the spec, each node's own kubelet extraArgs by hostname). Why: the dispatcher
# builds every node's node-env command from the same spec, and a walk of all its nodes per node
# cost 1.5 ms each at 10,000 nodes (15 s of one install's CPU). The weak reference tells a spec
# from a later one given the same id; a spec is immutable (frozen), so its index never goes stale.
_NODE_ARGS: dict[int, tuple[weakref.ref[ClusterSpec], dict[str, dict[str, str]]]] = {}
_NODE_ARGS_KEPT = 16  # specs indexed at once (a service holds a few clusters' plans)


def _node_args(spec: ClusterSpec) -> dict[str, dict[str, str]]:
    """The nodes' own kubelet extraArgs by hostname, made once per spec."""
    found = _NODE_ARGS.get(id(spec))
    if found is not None and found[0]() is spec:
        return found[1]
    index: dict[str, dict[str, str]] = {}
    for n in spec.nodes:
        if n.spec.kubelet is not None:
            index.setdefault(n.spec.hostname, {}).update(n.spec.kubelet.extra_args)
    if len(_NODE_ARGS) >= _NODE_ARGS_KEPT:
        _NODE_ARGS.clear()
    _NODE_ARGS[id(spec)] = (weakref.ref(spec), index)
    return index


def kubelet_args(spec: ClusterSpec, hostname: str) -> dict[str, str]:
    """The kubelet's extraArgs on one node: the cluster's, then the node's own, per flag."""
    return {**spec.config.kubelet.extra_args, **_node_args(spec).get(hostname, {})}


def requires_cgroup_v2(spec: ClusterSpec, hostname: str) -> bool:
    """True when the node's kubelet would refuse a cgroup v1 host: failCgroupV1 is true, by
    upstream's default from 1.35 (versions.CGROUP_V1_FAILS_FROM) or set so by the user."""
    value = kubelet_args(spec, hostname).get(FAIL_CGROUPV1)
    if value is not None and go_bool(value) is not None:
        return bool(go_bool(value))
    try:
        k8s = versions.parse_version(spec.config.kubernetes_version)
    except versions.VersionError:
        return False  # validation refuses the spec before any node is touched
    return versions.cgroup_v1_refused(k8s)


def cgroup_opt_out_warnings(spec: ClusterSpec, kubernetes: versions.Version) -> list[str]:
    """A warning per explicit opt-out of the cgroup v2 requirement where it is upstream's default."""
    if not versions.cgroup_v1_refused(kubernetes):
        return []
    layers = [("cluster.spec.clusterConfig.cluster.kubelet", spec.config.kubelet.extra_args)]
    layers += [(f"nodes[{i}].spec.kubelet", n.spec.kubelet.extra_args) for i, n in enumerate(spec.nodes) if n.spec.kubelet is not None]
    return [
        f"{prefix}.extraArgs.{FAIL_CGROUPV1}: the kubelet of {kubernetes.minor_key} will start on cgroup v1 hosts; "
        "upstream deprecated cgroup v1 (KEP-5573) and plans to remove it: move the hosts to cgroup v2"
        for prefix, args in layers
        if go_bool(args.get(FAIL_CGROUPV1, "")) is False
    ]
