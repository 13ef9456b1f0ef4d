"""Addons on a real cluster: server-side apply with the `kubernetes` client, as `bke`.

Credentials, as the certs service stores them for this use (bke.adapters.pki.api_credentials, encrypted
at rest) and opened with the `api` at-rest key (BKE_KEY_FILE_API, bke.core.secrets.key_kinds), in
memory only: admin.conf
for every addon, and super-admin.conf (on no node; group system:masters) for the bootstrap-RBAC
step alone, whose bindings are what give admin.conf its rights: kubeadm init uses super-admin.conf
the same way. Each addon is applied as an ApplySet of its own, and what its new version no
longer has is pruned (bke.adapters.cluster_api.applyset_k8s). Exercised against real apiservers
by a real-control-plane lab (`bke lab install --control-plane real`) and, for the ApplySet, by
tests/integration/test_addon_prune.py.
"""
from __future__ import annotations

import asyncio
from typing import Any

import yaml
from redis.asyncio import Redis

from bke.contracts.statuses import AddonStatus
from bke.core.applyset import PruneReport
from bke.adapters.pki.api_credentials import read_api_credential
from bke.core.plan import Plan
from bke.core.secrets import keyring_for

from .addons import AddonApplied
from .applyset_k8s import FIELD_MANAGER, apply_set

__all__ = ["KubernetesApplier", "FIELD_MANAGER", "apply_addon", "kube_system_pods"]


class KubernetesApplier:
    def __init__(self, redis: Redis):
        self.redis = redis
        self.keys = keyring_for("api")  # read now, and again when the file changes (a rotation)

    async def _admin_kubeconfig(self, plan: Plan, credential: str = "admin") -> dict[str, Any]:
        # written by the certs service (bke.adapters.pki.api_credentials): this service never reads the PKI
        return yaml.safe_load(await read_api_credential(self.redis, plan.cluster, credential, self.keys.box()))

    async def admin_kubeconfig(self, plan: Plan) -> dict[str, Any]:
        """For the other API users of the dispatcher (k8s_nodes: labels, Node Ready, workloads)."""
        return await self._admin_kubeconfig(plan)

    async def pod_status(self, plan: Plan) -> dict[str, Any]:
        """kube-system pods by phase, for the periodic health (where an apiserver answers)."""
        return await asyncio.to_thread(kube_system_pods, await self._admin_kubeconfig(plan))

    async def apply(self, plan: Plan, name: str, objects: list[dict[str, Any]], credential: str = "admin") -> AddonApplied:
        kubeconfig = await self._admin_kubeconfig(plan, credential)
        report = await asyncio.to_thread(apply_addon, kubeconfig, name, objects)
        return AddonApplied(AddonStatus.APPLIED, report)

    async def workload(self, plan: Plan, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """The object as the apiserver has it now (its status), read with admin.conf."""
        return await asyncio.to_thread(_read_object, await self._admin_kubeconfig(plan), kind, namespace, name)


def apply_addon(kubeconfig: dict[str, Any], name: str, objects: list[dict[str, Any]]) -> PruneReport:
    """The addon's objects applied as its ApplySet with this kubeconfig; what was pruned."""
    from kubernetes import config, dynamic

    api = config.new_client_from_config_dict(kubeconfig)
    try:
        return apply_set(dynamic.DynamicClient(api), name, objects)
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
