"""Cordon, drain and uncordon nodes: before and after the upgrader upgrades their runtime, and
before the dispatcher removes a worker (then its Node object is deleted too: `delete_nodes`).

Real clusters: what `kubectl drain --ignore-daemonsets` does (k8s.io/kubectl/pkg/drain): mark the
Node unschedulable, judge every pod on it by kubectl's rules (bke.core.drain: DaemonSet and mirror
pods left, a pod with emptyDir or without a controller refused unless the request allows it, the
whole node refused before anything is evicted), evict the rest through the Eviction API (so
PodDisruptionBudgets are honoured), try again an eviction a budget refuses (429) and wait until
every evicted pod is gone, both with backoff (bke.core.drain.backoff_delays), up to the drain
timeout. A drain that fails names the pods left and the budgets that blocked them, in the API's
own words; the node stays cordoned. Uncordon clears `spec.unschedulable`.

The nodes of one call drain side by side, each in a worker thread of a pool as wide as the call
(up to `MAX_PARALLEL_DRAINS`): the upgrader passes a whole batch, and the default pool (a few
threads on a small machine) would drain a batch of hundreds a few nodes at a time.

The lab's kubelet stand-ins have no API: bke.lab.standins.drain records each action instead;
tests/e2e/test_lab_real_control_plane.py drains through a real apiserver and kwok's pods.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from bke.contracts.drain import DrainOptions
from bke.core.drain import (MIRROR_ANNOTATION, PodFacts, backoff_delays, blocking_budget, refusal_message, select_pods,
                            timeout_message)
from bke.core.errors import TemporaryError
from bke.core.plan import Plan

__all__ = ["Drainer", "KubernetesDrainer", "MAX_PARALLEL_DRAINS"]

MAX_PARALLEL_DRAINS = 64  # threads, each one HTTP conversation at a time with the apiserver


class Drainer(Protocol):
    async def cordon_and_drain(self, plan: Plan, hosts: list[str], timeout_s: float,
                               options: DrainOptions = DrainOptions()) -> str:
        """"" when every host is cordoned and drained, else why not (the step fails)."""

    async def uncordon(self, plan: Plan, hosts: list[str]) -> None: ...

    async def delete_nodes(self, plan: Plan, hosts: list[str]) -> None:
        """Delete the hosts' Node objects (a node that has none already is fine)."""


class KubernetesDrainer:
    """Through the cluster's API with admin.conf (the dispatcher's applier supplies it)."""

    def __init__(self, kubeconfig: Callable[[Plan], Any]):
        self.kubeconfig = kubeconfig

    async def cordon_and_drain(self, plan: Plan, hosts: list[str], timeout_s: float,
                               options: DrainOptions = DrainOptions()) -> str:
        if not hosts:
            return ""
        conf = await self.kubeconfig(plan)
        loop = asyncio.get_running_loop()
        with ThreadPoolExecutor(max_workers=min(len(hosts), MAX_PARALLEL_DRAINS), thread_name_prefix="drain") as pool:
            results = await asyncio.gather(*(loop.run_in_executor(pool, _drain_node, conf, h, timeout_s, options)
                                             for h in hosts))
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


def pod_facts(pod: Any) -> PodFacts:
    """What the drain rules read of a Pod (kubernetes client model)."""
    meta, spec = pod.metadata, pod.spec
    controller = next((o.kind for o in meta.owner_references or [] if o.controller), None)
    return PodFacts(namespace=meta.namespace, name=meta.name, uid=meta.uid or "",
                    phase=(pod.status.phase if pod.status else None) or "",
                    mirror=MIRROR_ANNOTATION in (meta.annotations or {}), controller_kind=controller,
                    emptydir=any(v.empty_dir is not None for v in (spec.volumes if spec else None) or []))


def _pods_on(api: Any, host: str) -> dict[str, PodFacts]:
    pods = api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={host}").items
    return {f.ref: f for f in map(pod_facts, pods)}


def _evict(api: Any, pod: PodFacts) -> tuple[bool, str]:
    """(evicted or gone, ""), (False, the budget's words) on a 429, else raises with the API's answer."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.name, namespace=pod.namespace))
    try:
        api.create_namespaced_pod_eviction(pod.name, pod.namespace, body)
    except ApiException as exc:
        if exc.status == 404:
            return True, ""  # gone already
        if exc.status == 429:
            return False, blocking_budget(exc.body) or "a PodDisruptionBudget refuses for now"
        raise
    return True, ""


def _drain_node(conf: dict[str, Any], host: str, timeout_s: float, options: DrainOptions) -> str:
    from kubernetes.client.exceptions import ApiException

    _set_unschedulable(conf, host, True)
    api = _core(conf)
    deadline = time.monotonic() + timeout_s
    chosen = select_pods(list(_pods_on(api, host).values()), options)
    if chosen.refused:
        return refusal_message(host, chosen.refused)
    waiting = {p.ref: p for p in chosen.evict}  # until each is gone (or replaced: another uid)
    to_evict, budgets = dict(waiting), dict[str, str]()
    for delay in backoff_delays():
        for ref, pod in list(to_evict.items()):
            try:
                done, why = _evict(api, pod)
            except ApiException as exc:
                return f"node {host}: evicting {ref}: {exc.status} {exc.reason}"
            if done:
                del to_evict[ref]
                budgets.pop(ref, None)
            else:
                budgets[ref] = why
        now = _pods_on(api, host)
        waiting = {ref: p for ref, p in waiting.items() if ref in now and now[ref].uid == p.uid}
        if not waiting:
            return ""
        if time.monotonic() >= deadline:
            return timeout_message(host, timeout_s, list(waiting), budgets)
        time.sleep(min(delay, max(deadline - time.monotonic(), 0.0)))  # backoff, in this worker thread
    return ""  # not reached: the delays never end
