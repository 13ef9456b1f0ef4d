"""Nodes and workloads on a real cluster, through the API, as `bke` (admin.conf, as apply_k8s).

- `mark` (`bke.adapters.cluster_api.k8s_node_marks`, shared with the upgrader): read each Node of the batch (a GET each: a batch reads only its own nodes, where a
  list would read all 10,000 per batch), patch those lacking BKE's labels or taints (`labels.node_patch`: a JSON merge patch with the
  Node's resourceVersion as precondition, field manager `bke`), `PATCH_WORKERS` at a time.
- `nodes` / `workload`: what the health phase and the periodic health read.

Not exercised here: no apiserver can run on the development machines. The decisions these
calls carry out are pure and unit-tested on recorded API objects (labels.py, api_health.py).
Errors: 404 on a patch (the Node went away) and 409 (it changed) are read again next round;
other 4xx are the input's fault (ValueError: the phase fails with the API's reason); 5xx and
connection errors are TemporaryError (the runner comes back).
"""
from __future__ import annotations

import asyncio
from typing import Any

from bke.adapters.cluster_api.k8s_node_marks import PATCH_WORKERS, KubernetesNodeMarker, api_error, client_of
from bke.core.plan import Plan

from .api_health import Workload

__all__ = ["KubernetesNodes", "LIST_PAGE", "PATCH_WORKERS"]

LIST_PAGE = 500  # Nodes per list page: a 10,000-node list in 20 requests of ~2 MB at most


class KubernetesNodes(KubernetesNodeMarker):
    """The upgrader's marker (`mark`), and what the dispatcher's health reads besides."""

    async def nodes(self, plan: Plan) -> dict[str, dict[str, Any]]:
        return await asyncio.to_thread(_list_nodes_with, await self.applier.admin_kubeconfig(plan))

    async def workload(self, plan: Plan, w: Workload) -> dict[str, Any] | None:
        return await asyncio.to_thread(_get_workload, await self.applier.admin_kubeconfig(plan), w)


def _list_nodes(dyn: Any) -> dict[str, dict[str, Any]]:
    nodes_api = dyn.resources.get(api_version="v1", kind="Node")
    out: dict[str, dict[str, Any]] = {}
    token = None
    while True:
        page = dyn.get(nodes_api, limit=LIST_PAGE, _continue=token).to_dict()
        for item in page.get("items") or []:
            out[item["metadata"]["name"]] = item
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return out


def _list_nodes_with(kubeconfig: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from kubernetes import dynamic
    from kubernetes.client import exceptions

    api = client_of(kubeconfig)
    try:
        return _list_nodes(dynamic.DynamicClient(api))
    except exceptions.ApiException as exc:
        raise api_error("list nodes", exc) from exc
    finally:
        api.close()


def _get_workload(kubeconfig: dict[str, Any], w: Workload) -> dict[str, Any] | None:
    from kubernetes import dynamic
    from kubernetes.client import exceptions

    api = client_of(kubeconfig)
    try:
        dyn = dynamic.DynamicClient(api)
        res = dyn.resources.get(api_version="apps/v1", kind=w.kind)
        try:
            return dyn.get(res, name=w.name, namespace=w.namespace).to_dict()
        except exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise api_error(w.ref, exc) from exc
    finally:
        api.close()
