"""Addons on a real cluster: server-side apply with the `kubernetes` client, as `bke`.

Credentials, taken from the PKI store (keys encrypted at rest) with the operator's key
(`BKE_SECRET_KEY_FILE`), in memory only: admin.conf for every addon, and super-admin.conf (on no
node; group system:masters) for the bootstrap-RBAC step alone, whose bindings are what give
admin.conf its rights: kubeadm init uses super-admin.conf the same way. Not exercised here: no
apiserver can run on the development machines (the lab validates and records instead).
"""
from __future__ import annotations

import asyncio
from typing import Any

import yaml
from redis.asyncio import Redis

from bke.errors import TemporaryError
from bke.paths import ADMIN_CONF
from bke.pki.operations import cluster_kubeconfig, node_bundle
from bke.pki.store_redis import RedisPkiStore
from bke.plan import Plan
from bke.secrets import box_from_env

from ..plan.api_node import init_node

__all__ = ["KubernetesApplier", "FIELD_MANAGER", "kube_system_pods"]

FIELD_MANAGER = "bke"


class KubernetesApplier:
    def __init__(self, redis: Redis):
        self.store = RedisPkiStore(redis)
        self.box = box_from_env()

    async def _admin_kubeconfig(self, plan: Plan, credential: str = "admin") -> dict[str, Any]:
        if credential == "super-admin":
            return yaml.safe_load(await cluster_kubeconfig(plan.cluster, self.store, "super-admin.conf", self.box))
        files = await node_bundle(plan, self.store, init_node(plan).hostname, self.box)
        conf = next((f for f in files if f.path == ADMIN_CONF), None)
        if conf is None:
            raise TemporaryError(f"no admin.conf for cluster {plan.cluster} yet", delay=5.0)
        return yaml.safe_load(conf.content)

    async def admin_kubeconfig(self, plan: Plan) -> dict[str, Any]:
        """For the other API users of the dispatcher (k8s_nodes: labels, Node Ready, workloads)."""
        return await self._admin_kubeconfig(plan)

    async def pod_status(self, plan: Plan) -> dict[str, Any]:
        """kube-system pods by phase, for the periodic health (where an apiserver answers)."""
        return await asyncio.to_thread(kube_system_pods, await self._admin_kubeconfig(plan))

    async def apply(self, plan: Plan, name: str, objects: list[dict[str, Any]], credential: str = "admin") -> str:
        kubeconfig = await self._admin_kubeconfig(plan, credential)
        await asyncio.to_thread(_apply_all, kubeconfig, objects)
        return "Applied"

    async def workload(self, plan: Plan, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """The object as the apiserver has it now (its status), read with admin.conf."""
        return await asyncio.to_thread(_read_object, await self._admin_kubeconfig(plan), kind, namespace, name)


def _apply_all(kubeconfig: dict[str, Any], objects: list[dict[str, Any]]) -> None:
    from kubernetes import config, dynamic
    from kubernetes.client import exceptions

    api = config.new_client_from_config_dict(kubeconfig)
    try:
        client = dynamic.DynamicClient(api)
        for obj in objects:
            resource = client.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            try:
                client.server_side_apply(resource, body=obj, field_manager=FIELD_MANAGER, force_conflicts=True)
            except exceptions.ApiException as exc:
                if exc.status and exc.status >= 500:
                    raise TemporaryError(f"{obj['kind']}/{obj['metadata'].get('name')}: {exc.reason}", delay=5.0) from exc
                raise ValueError(f"{obj['kind']}/{obj['metadata'].get('name')}: {exc.status} {exc.reason}") from exc
    finally:
        api.close()


def _read_object(kubeconfig: dict[str, Any], kind: str, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import config, dynamic
    from kubernetes.client import exceptions

    api_version = {"DaemonSet": "apps/v1", "Deployment": "apps/v1"}[kind]
    api = config.new_client_from_config_dict(kubeconfig)
    try:
        resource = dynamic.DynamicClient(api).resources.get(api_version=api_version, kind=kind)
        try:
            return resource.get(name=name, namespace=namespace, _request_timeout=10).to_dict()
        except exceptions.ApiException as exc:
            if exc.status == 404 or (exc.status and exc.status >= 500):
                return {}  # not there yet, or a passing apiserver error: not ready, asked again
            raise ValueError(f"{kind} {namespace}/{name}: {exc.status} {exc.reason}") from exc
    finally:
        api.close()


def kube_system_pods(kubeconfig: dict[str, Any]) -> dict[str, Any]:
    from kubernetes import client, config

    api = config.new_client_from_config_dict(kubeconfig)
    try:
        pods = client.CoreV1Api(api).list_namespaced_pod("kube-system", _request_timeout=10).items
    finally:
        api.close()
    phases: dict[str, int] = {}
    not_ready: list[str] = []
    for pod in pods:
        phase = (pod.status.phase if pod.status else None) or "Unknown"
        phases[phase] = phases.get(phase, 0) + 1
        if phase != "Running" and phase != "Succeeded":
            not_ready.append(str(pod.metadata.name if pod.metadata else ""))
    return {"pods": len(pods), "phases": phases, "notRunning": sorted(not_ready)[:50]}
