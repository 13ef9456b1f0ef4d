"""Wire upstream's calico.yaml to a cluster: pod CIDR, IPAM block size, images, data plane. Pure.

The manifest itself is never in this repository: the dispatcher fetches
`<httpRepo>/calico/<version>/calico.yaml` (bke.core.artefacts.cluster_artefacts) and checks it against
the `.sha256` beside it. What we change, in calico-node's container (calico's own knobs, see
docs.tigera.io/calico/<version>/reference/configure-calico-node and .../reference/felix/configuration):

* one pool per family of the spec's podSubnet (one CIDR, or a dual-stack pair "IPv4,IPv6",
  bke.core.spec.pod_subnets), as calico's "Configure dual stack or IPv6 only" lists the settings for a
  manifest install (docs.tigera.io/calico/<version>/networking/ipam/ipv6; each variable as
  reference/configure-calico-node defines it):
  - IPv4: ``CALICO_IPV4POOL_CIDR`` = the IPv4 subnet (upstream ships it commented out, and calico
    then falls back to 192.168.0.0/16, which need not be the cluster's pod network at all) and
    ``CALICO_IPV4POOL_BLOCK_SIZE`` = 26;
  - IPv6: ``CALICO_IPV6POOL_CIDR`` = the IPv6 subnet (else calico makes up a random ULA /48),
    ``CALICO_IPV6POOL_BLOCK_SIZE`` = 122, ``FELIX_IPV6SUPPORT`` = true (upstream: false) and
    ``IP6`` = autodetect (the node's IPv6 address, which BGP routes the IPv6 pool over);
  - IPv6 only: also ``IP`` = none (no IPv4 address to autodetect) and ``CALICO_ROUTER_ID`` =
    hash (BGP needs a router id in IPv4 form, else taken from the node's IPv4 address);
  - the CNI configuration's IPAM (``cni_network_config`` in the calico-config ConfigMap):
    ``assign_ipv4`` / ``assign_ipv6`` "true" or "false" per family, so each pod gets exactly the
    families of the pod subnet.
  Block sizes are calico's defaults (26 and 122), written down so that the size check at plan
  time (bke.core.spec.sizes) and the pools agree: each node takes blocks of 64 addresses (/26, /122).
* ``FELIX_NFTABLESMODE`` = ``Enabled`` when kube-proxy runs in nftables mode: calico's docs
  ("Calico nftables data plane") require both to match. Other modes leave felix's default.
* Every image moves to the spec's imageRepo (offline registries) unless that is the default
  registry.k8s.io, which does not host calico: `docker.io/calico/node:v3.31.3` becomes
  `<imageRepo>/calico/node:v3.31.3` (:func:`calico_image`; `bke bundle build` lists the same).
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from bke.core.spec.pod_subnets import Network, parse_pod_subnets

__all__ = ["BLOCK_SIZE", "BLOCK_SIZES", "CalicoWiring", "calico_image", "find_calico_node", "wire_calico"]

BLOCK_SIZES = {4: 26, 6: 122}  # calico's IPPool blockSize defaults, per family
BLOCK_SIZE = BLOCK_SIZES[4]
DEFAULT_REGISTRY = "registry.k8s.io"
# calico.yaml's IPAM stanza in cni_network_config: the template is not JSON (``"mtu": __CNI_MTU__``),
# so the family switches go in beside its "type" by text, and must then appear exactly once.
_IPAM_TYPE = re.compile(r'"type"\s*:\s*"calico-ipam"')


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


def _wire_cni_ipam(objects: list[dict[str, Any]], v4: bool, v6: bool) -> None:
    """Set assign_ipv4/assign_ipv6 in the calico-config ConfigMap's CNI template (in place)."""
    cm = next((o for o in objects if o.get("kind") == "ConfigMap"
               and (o.get("metadata") or {}).get("name") == "calico-config"), None)
    template = ((cm or {}).get("data") or {}).get("cni_network_config")
    if not isinstance(template, str):
        raise ValueError("no cni_network_config in ConfigMap kube-system/calico-config: not calico's calico.yaml")
    if '"assign_ipv4"' in template or '"assign_ipv6"' in template:
        raise ValueError("calico-config's cni_network_config already sets assign_ipv4/assign_ipv6: not upstream's template")
    found = _IPAM_TYPE.findall(template)
    if len(found) != 1:
        raise ValueError(f"calico-config's cni_network_config has {len(found)} calico-ipam stanzas, expected one")
    switches = f'"type": "calico-ipam", "assign_ipv4": "{str(v4).lower()}", "assign_ipv6": "{str(v6).lower()}"'
    assert cm is not None
    cm["data"]["cni_network_config"] = _IPAM_TYPE.sub(switches, template)


def wire_calico(objects: list[dict[str, Any]], wiring: CalicoWiring) -> list[dict[str, Any]]:
    """A wired copy of calico's objects (the input is not changed); ValueError naming what does
    not fit (the pod subnet, or a manifest that is not calico's)."""
    by_family: dict[int, Network] = {n.version: n for n in parse_pod_subnets(wiring.pod_subnet)}
    for net in by_family.values():
        if net.prefixlen > BLOCK_SIZES[net.version]:
            raise ValueError(f"podSubnet {net} is smaller than one calico block (/{BLOCK_SIZES[net.version]})")
    out = copy.deepcopy(objects)
    node = find_calico_node(out)
    containers = node["spec"]["template"]["spec"].get("containers") or []
    main = next((c for c in containers if c.get("name") == "calico-node"), None)
    if main is None:
        raise ValueError("DaemonSet kube-system/calico-node has no container named calico-node")
    v4, v6 = by_family.get(4), by_family.get(6)
    if v4 is not None:
        _set_env(main, "CALICO_IPV4POOL_CIDR", str(v4))
        _set_env(main, "CALICO_IPV4POOL_BLOCK_SIZE", str(BLOCK_SIZES[4]))
    if v6 is not None:
        _set_env(main, "CALICO_IPV6POOL_CIDR", str(v6))
        _set_env(main, "CALICO_IPV6POOL_BLOCK_SIZE", str(BLOCK_SIZES[6]))
        _set_env(main, "FELIX_IPV6SUPPORT", "true")
        _set_env(main, "IP6", "autodetect")
        if v4 is None:
            _set_env(main, "IP", "none")
            _set_env(main, "CALICO_ROUTER_ID", "hash")
        # IPv4 only keeps upstream's template untouched: calico-ipam assigns IPv4 by default
        _wire_cni_ipam(out, v4 is not None, True)
    if wiring.kube_proxy_mode == "nftables":
        _set_env(main, "FELIX_NFTABLESMODE", "Enabled")
    for obj in out:
        for pod in _pod_specs(obj):
            for c in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
                if isinstance(c.get("image"), str):
                    c["image"] = calico_image(wiring.image_repo, c["image"])
    return out
