"""The cluster's side of the dispatcher: the httpRepo's checksums, the install's local phases
(addons, node labels, API health), the operations' node marks and drains, and the periodic
health's pod reads. Over the cluster's API and a real httpRepo, or, in the lab, over the lab's
stand-ins (bke.lab.standins): the only module of the dispatcher that imports them."""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bke.adapters.checksums import HttpRepoChecksums
from bke.adapters.cluster_api.addons import AddonsWork
from bke.adapters.cluster_api.manifests import HttpRepoManifests
from bke.adapters.cluster_api.node_labels import NodeLabelsWork, NodeMarker
from bke.core.plan import Plan
from bke.lab.standins.addons import LabApplier
from bke.lab.standins.checksums import LabChecksums
from bke.lab.standins.manifests import LabManifests
from bke.lab.standins.node_labels import LabNodes

from ..api_health import ApiHealthWork, periodic_doc
from ..ports import Checksums
from ..local_work import LocalPhases
from .basics import Basics

__all__ = ["ClusterApi", "cluster_api"]


@dataclass(frozen=True)
class ClusterApi:
    checksums: Checksums
    local: LocalPhases
    marker: NodeMarker  # the new nodes' labels and taints (a join's last step)
    kubeconfig: Callable[[Plan], Awaitable[object]] | None  # admin.conf for a removal's drain; None: the lab's
    pods: Callable[[Plan], Awaitable[dict]] | None  # the periodic health's pod reads; None: nothing to ask


def cluster_api(b: Basics) -> ClusterApi:
    s = b.settings
    lab = s.mode == "lab"
    nodes_api: Any = None  # the lab: nothing to ask an API
    if not lab or s.cluster_api == "real":
        from bke.adapters.cluster_api.apply_k8s import KubernetesApplier

        from ..k8s_nodes import KubernetesNodes

        applier: Any = KubernetesApplier(b.redis)
        nodes_api = KubernetesNodes(applier)
    else:
        applier = LabApplier()
    # the lab simulates the httpRepo (placeholders, a calico stand-in) unless told to use a
    # real one (`bke lab install --http-repo`, BKE_DISPATCHER_REPO_SOURCE=http-repo)
    simulated_repo = lab and s.repo_source == "auto"
    marker = nodes_api or LabNodes()
    local = LocalPhases({
        "addons": AddonsWork(b.redis, applier, b.now, LabManifests() if simulated_repo else HttpRepoManifests()),
        "node-labels": NodeLabelsWork(b.redis, marker, b.now),
        "health": ApiHealthWork(b.redis, nodes_api, b.now),
    })
    pods = None
    if nodes_api is not None:  # real clusters: kube-system pods, every Node Ready, the CNI and CoreDNS
        api = nodes_api

        async def pods(plan: Plan) -> dict:
            return {**await applier.pod_status(plan), **await periodic_doc(plan, api)}
    return ClusterApi(checksums=LabChecksums() if simulated_repo else HttpRepoChecksums(), local=local, marker=marker,
                      kubeconfig=None if nodes_api is None else applier.admin_kubeconfig, pods=pods)
