"""The Node a kubelet registers, built from its unit's flags: one shape for the lab's kubelet
stand-in (bke_agent.kubelet.node_api, with the node's own credentials) and the scale runs that
register many kwok nodes at once (bke.lab.kwok_nodes). Pure: no I/O."""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import Any

__all__ = ["KWOK_ANNOTATION", "KubeletFlags", "kubelet_flags", "node_object"]

# kwok (bke.lab.kwok) manages only the Nodes carrying this annotation
KWOK_ANNOTATION = "bke.bocloud.com/lab-kubelet=kwok"


@dataclass(frozen=True)
class KubeletFlags:
    name: str
    ip: str
    kubeconfig: str  # a node path
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()


def _exec_start(unit_text: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", unit_text)
    line = next((ln for ln in joined.splitlines() if ln.strip().startswith("ExecStart=")), "")
    return shlex.split(line.strip()[len("ExecStart="):])


def _taint(text: str) -> dict[str, str]:
    kv, _, effect = text.partition(":")
    key, _, value = kv.partition("=")
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def kubelet_flags(unit_text: str, default_ip: str) -> KubeletFlags | None:
    """The registration flags of a kubelet unit; None when it names no kubeconfig."""
    flags: dict[str, str] = {}
    for arg in _exec_start(unit_text)[1:]:
        if arg.startswith("--") and "=" in arg:
            k, _, v = arg.partition("=")
            flags[k[2:]] = v
    if "kubeconfig" not in flags:
        return None
    labels = dict(p.split("=", 1) for p in flags.get("node-labels", "").split(",") if "=" in p)
    taints = tuple(_taint(t) for t in flags.get("register-with-taints", "").split(",") if t)
    name = flags.get("hostname-override", "")
    return KubeletFlags(name, flags.get("node-ip", default_ip), flags["kubeconfig"], labels, taints)


def node_object(flags: KubeletFlags, max_pods: int, kubelet_version: str) -> dict[str, Any]:
    """The Node a kubelet of these flags registers (status included, as the kubelet sends it)."""
    resources = {"cpu": "8", "memory": "32Gi", "pods": str(max_pods), "ephemeral-storage": "100Gi"}
    spec: dict[str, Any] = {"taints": list(flags.taints)} if flags.taints else {}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": flags.name,
            "labels": {"kubernetes.io/hostname": flags.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", **flags.labels},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", KWOK_ANNOTATION.split("=")[0]: KWOK_ANNOTATION.split("=")[1]},
        },
        "spec": spec,
        "status": {
            "addresses": [{"type": "InternalIP", "address": flags.ip}, {"type": "Hostname", "address": flags.name}],
            "capacity": resources, "allocatable": resources,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"kubeletVersion": kubelet_version, "kubeProxyVersion": "", "operatingSystem": "linux",
                         "architecture": "amd64", "containerRuntimeVersion": "containerd://lab", "osImage": "bke lab",
                         "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": ""},
        },
    }


