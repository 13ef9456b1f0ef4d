"""Wire upstream's calico.yaml to a cluster: pod CIDR, IPAM block size, images, data plane. Pure.

The manifest itself is never in this repository: the dispatcher fetches
`<httpRepo>/calico/<version>/calico.yaml` (bke.artefacts.cluster_artefacts) and checks it against
the `.sha256` beside it. What we change, in calico-node's container (calico's own knobs, see
docs.tigera.io/calico/<version>/reference/configure-calico-node and .../reference/felix/configuration):

* ``CALICO_IPV4POOL_CIDR`` = the spec's podSubnet. Upstream ships it commented out, and calico
  then falls back to 192.168.0.0/16, which need not be the cluster's pod network at all.
* ``CALICO_IPV4POOL_BLOCK_SIZE`` = 26 (calico's default, written down so the size check at plan
  time and the pool agree: each node takes /26 blocks of 64 addresses from the pool).
* ``FELIX_NFTABLESMODE`` = ``Enabled`` when kube-proxy runs in nftables mode: calico's docs
  ("Calico nftables data plane") require both to match. Other modes leave felix's default.
* Every image moves to the spec's imageRepo (offline registries) unless that is the default
  registry.k8s.io, which does not host calico: `docker.io/calico/node:v3.31.3` becomes
  `<imageRepo>/calico/node:v3.31.3` (:func:`calico_image`; `bke bundle build` lists the same).
"""
from __future__ import annotations

import copy
import ipaddress
from dataclasses import dataclass
from typing import Any

__all__ = ["BLOCK_SIZE", "CalicoWiring", "calico_image", "find_calico_node", "wire_calico"]

BLOCK_SIZE = 26
DEFAULT_REGISTRY = "registry.k8s.io"


@dataclass(frozen=True)
class CalicoWiring:
    """What the cluster says about its pod network (see wire_calico)."""

    pod_subnet: str
    image_repo: str
    kube_proxy_mode: str = "iptables"


def calico_image(image_repo: str, ref: str) -> str:
    """Upstream's image reference, moved to the cluster's registry (see the module docstring)."""
    repo = image_repo.rstrip("/")
    if repo == DEFAULT_REGISTRY:
        return ref
    first, sep, rest = ref.partition("/")
    # a registry host has a dot or a port (docker's rule); "calico/node:v1" has none
    path = rest if sep and ("." in first or ":" in first or first == "localhost") else ref
    return f"{repo}/{path}"


def find_calico_node(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The calico-node DaemonSet in kube-system; ValueError if the manifest is not calico's."""
    for obj in objects:
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "DaemonSet" and meta.get("name") == "calico-node" and meta.get("namespace") == "kube-system":
            return obj
    raise ValueError("no DaemonSet kube-system/calico-node in the manifest: not calico's calico.yaml")


def _set_env(container: dict[str, Any], name: str, value: str) -> None:
    env = container.setdefault("env", [])
    for item in env:
        if item.get("name") == name:
            item.pop("valueFrom", None)
            item["value"] = value
            return
    env.append({"name": name, "value": value})


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj.get("kind") in ("DaemonSet", "Deployment", "StatefulSet", "ReplicaSet", "Job"):
        return [obj.get("spec", {}).get("template", {}).get("spec", {})]
    if obj.get("kind") == "Pod":
        return [obj.get("spec", {})]
    return []


def wire_calico(objects: list[dict[str, Any]], wiring: CalicoWiring) -> list[dict[str, Any]]:
    """A wired copy of calico's objects (the input is not changed)."""
    net = ipaddress.ip_network(wiring.pod_subnet, strict=True)
    if net.version != 4:
        raise ValueError(f"podSubnet {net}: BKE wires calico's IPv4 pool only")
    if net.prefixlen > BLOCK_SIZE:
        raise ValueError(f"podSubnet {net} is smaller than one calico block (/{BLOCK_SIZE})")
    out = copy.deepcopy(objects)
    node = find_calico_node(out)
    containers = node["spec"]["template"]["spec"].get("containers") or []
    main = next((c for c in containers if c.get("name") == "calico-node"), None)
    if main is None:
        raise ValueError("DaemonSet kube-system/calico-node has no container named calico-node")
    _set_env(main, "CALICO_IPV4POOL_CIDR", str(net))
    _set_env(main, "CALICO_IPV4POOL_BLOCK_SIZE", str(BLOCK_SIZE))
    if wiring.kube_proxy_mode == "nftables":
        _set_env(main, "FELIX_NFTABLESMODE", "Enabled")
    for obj in out:
        for pod in _pod_specs(obj):
            for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
                if isinstance(c.get("image"), str):
                    c["image"] = calico_image(wiring.image_repo, c["image"])
    return out
