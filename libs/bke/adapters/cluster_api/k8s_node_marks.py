"""Node labels and taints patched through the API, as `bke` (admin.conf, as apply_k8s): the
real-cluster side of `node_labels.NodeLabelsWork` (the dispatcher's install phase, the
upgrader's run of a changed spec).

Each Node of a batch is read (a GET each: a batch reads only its own nodes) and patched where it
lacks BKE's labels or taints (`labels.node_patch`: a JSON merge patch with the Node's
resourceVersion as precondition, field manager `bke`), `PATCH_WORKERS` at a time.
Not exercised here: no apiserver can run on the development machines.
Errors: 404 on a patch (the Node went away) and 409 (it changed) are read again next round;
other 4xx are the input's fault (ValueError: the step fails with the API's reason); 5xx and
connection errors are TemporaryError (the runner comes back).
"""
from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bke.contracts.statuses import MarkStatus
from bke.core.errors import TemporaryError
from bke.core.plan import NodePlan, Plan
from .apply_k8s import FIELD_MANAGER, KubernetesApplier
from .labels import Marks, node_patch
from .node_labels import NodesApplied

__all__ = ["KubernetesNodeMarker", "MERGE_PATCH", "PATCH_WORKERS", "api_error", "client_of", "mark_nodes"]

PATCH_WORKERS = 16  # patches in flight at once: well under the apiserver's default max-mutating-requests-inflight (200)
MERGE_PATCH = "application/merge-patch+json"


class KubernetesNodeMarker:
    def __init__(self, applier: KubernetesApplier):
        self.applier = applier  # its admin.conf (from the encrypted PKI store, in memory only)

    async def mark(self, plan: Plan, batch: list[tuple[NodePlan, Marks, Marks | None]]) -> NodesApplied:
        kubeconfig = await self.applier.admin_kubeconfig(plan)
        return await asyncio.to_thread(mark_nodes, kubeconfig, batch)


def api_error(what: str, exc: Any) -> Exception:
    status = getattr(exc, "status", None)
    if status is None or status >= 500 or status == 429:
        return TemporaryError(f"{what}: {getattr(exc, 'reason', exc)}", delay=5.0)
    return ValueError(f"{what}: {status} {getattr(exc, 'reason', '')} {str(getattr(exc, 'body', ''))[:300]}")


def client_of(kubeconfig: dict[str, Any]) -> Any:
    from kubernetes import config

    return config.new_client_from_config_dict(kubeconfig)


def mark_nodes(kubeconfig: dict[str, Any], batch: list[tuple[NodePlan, Marks, Marks | None]]) -> NodesApplied:
    from kubernetes import dynamic
    from kubernetes.client import exceptions

    api = client_of(kubeconfig)
    out = NodesApplied()
    try:
        dyn = dynamic.DynamicClient(api)
        nodes_api = dyn.resources.get(api_version="v1", kind="Node")

        def one(item: tuple[NodePlan, Marks, Marks | None]) -> tuple[str, str]:
            node, want, before = item
            try:
                obj = dyn.get(nodes_api, name=node.hostname).to_dict()
            except exceptions.ApiException as exc:
                if exc.status == 404:
                    return node.hostname, "missing"
                raise api_error(f"get Node {node.hostname}", exc) from exc
            patch = node_patch(obj, want, before)
            if patch is None:
                return node.hostname, "Present"  # already carries BKE's marks: nothing written
            try:
                dyn.patch(nodes_api, name=node.hostname, body=patch, content_type=MERGE_PATCH, field_manager=FIELD_MANAGER)
            except exceptions.ApiException as exc:
                if exc.status in (404, 409):
                    return node.hostname, "conflict"
                raise api_error(f"Node {node.hostname}", exc) from exc
            return node.hostname, MarkStatus.APPLIED

        with ThreadPoolExecutor(PATCH_WORKERS, thread_name_prefix="bke-node-labels") as pool:
            for name, how in pool.map(one, batch):
                if how == "missing":
                    out.missing.append(name)
                elif how == "conflict":
                    out.conflicts.append(name)
                else:
                    out.applied[name] = how
    finally:
        api.close()
    return out
