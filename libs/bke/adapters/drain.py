"""Cordon, drain and uncordon nodes: before and after the upgrader upgrades their runtime, and
before the dispatcher removes a worker (then its Node object is deleted too: `delete_nodes`).

Real clusters: what `kubectl drain` does (k8s.io/kubectl/pkg/drain/drain.go, `GetPodsForDeletion`
and `evictPods`): mark the Node unschedulable, then evict (policy/v1 Eviction, so that
PodDisruptionBudgets are honoured) every pod on it except mirror pods (static pods: the kubelet
owns them) and DaemonSet pods (their controller would put them back at once), retrying an
eviction the API refuses with 429 (a budget that blocks for now) until the drain timeout; a
drain that times out fails the step with the pods still there, and the node stays cordoned.
Uncordon clears `spec.unschedulable`. Not exercised here: no apiserver runs on these machines.

The lab has no API: bke.lab.standins.drain records each action instead.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol


from bke.core.errors import TemporaryError
from bke.core.plan import Plan

__all__ = ["Drainer", "KubernetesDrainer"]

EVICT_RETRY_S = 5.0


class Drainer(Protocol):
    async def cordon_and_drain(self, plan: Plan, hosts: list[str], timeout_s: float) -> str:
        """"" when every host is cordoned and drained, else why not (the step fails)."""

    async def uncordon(self, plan: Plan, hosts: list[str]) -> None: ...

    async def delete_nodes(self, plan: Plan, hosts: list[str]) -> None:
        """Delete the hosts' Node objects (a node that has none already is fine)."""


class KubernetesDrainer:
    """Through the cluster's API with admin.conf (the dispatcher's applier supplies it)."""

    def __init__(self, kubeconfig: Callable[[Plan], Any]):
        self.kubeconfig = kubeconfig

    async def cordon_and_drain(self, plan: Plan, hosts: list[str], timeout_s: float) -> str:
        conf = await self.kubeconfig(plan)
        results = await asyncio.gather(*(asyncio.to_thread(_drain_node, conf, h, timeout_s) for h in hosts))
        problems = [r for r in results if r]
        return "; ".join(problems[:5])

    async def uncordon(self, plan: Plan, hosts: list[str]) -> None:
        conf = await self.kubeconfig(plan)
        await asyncio.gather(*(asyncio.to_thread(_set_unschedulable, conf, h, False) for h in hosts))

    async def delete_nodes(self, plan: Plan, hosts: list[str]) -> None:
        conf = await self.kubeconfig(plan)
        await asyncio.gather(*(asyncio.to_thread(_delete_node, conf, h) for h in hosts))


def _core(conf: dict[str, Any]) -> Any:
    from kubernetes import client, config

    return client.CoreV1Api(config.new_client_from_config_dict(conf))


def _set_unschedulable(conf: dict[str, Any], host: str, value: bool) -> None:
    from kubernetes.client.exceptions import ApiException

    try:
        _core(conf).patch_node(host, {"spec": {"unschedulable": value}})
    except ApiException as exc:
        if exc.status == 404:
            return  # no Node object (an etcd-only node, or one that left): nothing to cordon
        raise TemporaryError(f"node {host}: {'cordon' if value else 'uncordon'}: {exc.status} {exc.reason}", delay=5.0) from exc


def _delete_node(conf: dict[str, Any], host: str) -> None:
    """`kubectl delete node`: what kubeadm's docs ask after a drain, before `kubeadm reset`."""
    from kubernetes.client.exceptions import ApiException

    try:
        _core(conf).delete_node(host)
    except ApiException as exc:
        if exc.status == 404:
            return  # deleted already (a re-run)
        if exc.status >= 500 or exc.status == 429:
            raise TemporaryError(f"node {host}: delete: {exc.status} {exc.reason}", delay=5.0) from exc
        raise ValueError(f"node {host}: delete: {exc.status} {exc.reason}") from exc


def _evictable(pod: Any) -> bool:
    annotations = pod.metadata.annotations or {}
    if "kubernetes.io/config.mirror" in annotations:
        return False  # a static pod's mirror: the kubelet owns it
    owners = pod.metadata.owner_references or []
    if any(o.kind == "DaemonSet" for o in owners):
        return False
    return pod.status.phase not in ("Succeeded", "Failed")


def _drain_node(conf: dict[str, Any], host: str, timeout_s: float) -> str:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    _set_unschedulable(conf, host, True)
    api = _core(conf)
    deadline = time.monotonic() + timeout_s
    blocked: dict[str, str] = {}
    while True:
        pods = [p for p in api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={host}").items if _evictable(p)]
        if not pods:
            return ""
        for p in pods:
            body = client.V1Eviction(metadata=client.V1ObjectMeta(name=p.metadata.name, namespace=p.metadata.namespace))
            try:
                api.create_namespaced_pod_eviction(p.metadata.name, p.metadata.namespace, body)
                blocked.pop(p.metadata.name, None)
            except ApiException as exc:
                if exc.status == 404:
                    continue  # gone already
                if exc.status != 429:
                    return f"node {host}: evicting {p.metadata.namespace}/{p.metadata.name}: {exc.status} {exc.reason}"
                blocked[p.metadata.name] = f"{p.metadata.namespace}/{p.metadata.name}"  # a budget says not now
        if time.monotonic() > deadline:
            left = ", ".join(sorted(blocked.values())[:5]) or ", ".join(f"{p.metadata.namespace}/{p.metadata.name}" for p in pods[:5])
            return f"node {host}: drain not done within {timeout_s:.0f}s (a PodDisruptionBudget may block): {left}"
        time.sleep(EVICT_RETRY_S)  # the API's pace, in a worker thread
