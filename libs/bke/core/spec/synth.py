"""Generated specs for tests and benchmarks: N nodes on 127.x loopback addresses."""
from __future__ import annotations

from typing import Any

import yaml

from .models import API_VERSION

__all__ = ["FIT", "synth_docs", "synth_spec_text", "lab_ip"]

FIT = "fit"
# A pod subnet for big synthetic clusters: /10 holds 2^(24-10) = 16,384 node CIDRs of /24 and
# 2^(26-10) calico blocks, above MAX_NODES; it does not overlap the default service subnet
# 10.96.0.0/12 nor the 127.x lab addresses.
_BIG_POD_SUBNET = "10.0.0.0/10"
_DEFAULT_FITS = 204  # nodes the default 10.244.0.0/16 holds without a size warning (80% of 256)


def lab_ip(i: int, base: int = 100) -> str:
    """The i-th node's address: 127.<base + i // 65024>.x.y, unique for (256 - base) * 65,024 nodes."""
    return f"127.{base + i // 65024}.{(i % 65024) // 254}.{(i % 254) + 1}"


def synth_docs(
    nodes: int,
    *,
    name: str = "synth",
    masters: int = 3,
    split: bool = False,
    key_algorithm: str = "ECDSA-P256",
    kubernetes: str = "v1.33.2",
    etcd: str = "v3.5.1",
    containerd: str = "v2.1.1",
    base: int = 100,
    pod_subnet: str | None = FIT,
) -> list[dict[str, Any]]:
    """`masters` masters (master/node + etcd unless split), the rest workers; with `split`,
    three etcd-events and three etcd-pods nodes and the apiserver on the first master only.

    `pod_subnet`: FIT (default) leaves the spec's default when it holds the cluster and picks a
    /10 otherwise, so that a synthetic spec passes the size checks; None always leaves the
    default (for tests of those checks); any other value is written as is."""
    cluster = {
        "kubernetesVersion": kubernetes,
        "etcdVersion": etcd,
        "containerdVersion": containerd,
        "certificates": {"keyAlgorithm": key_algorithm},
        **_networking(pod_subnet, nodes),
    }
    return [_cluster_doc(name, lab_ip(0, base), cluster),
            *(_node_doc(name, i, lab_ip(i, base), _roles(i, masters, split)) for i in range(nodes))]


def _roles(i: int, masters: int, split: bool) -> list[str]:
    """The i-th node's roles: masters first, then (split) three etcd-events and three etcd-pods
    nodes, then workers."""
    if i < masters:
        return ["master", "etcd"] + (["apiserver"] if split and i == 0 else [])
    if split and i < masters + 3:
        return ["etcd-event"]
    if split and i < masters + 6:
        return ["etcd-pod"]
    return ["node"]


def _cluster_doc(name: str, endpoint_ip: str, cluster: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "BKECluster",
        "metadata": {"name": name},
        "spec": {
            "controlPlaneEndpoint": {"host": endpoint_ip, "port": 6443},
            "clusterConfig": {"cluster": cluster},
        },
    }


def _node_doc(name: str, i: int, ip: str, roles: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "BKENode",
        "metadata": {"name": f"{name}-n{i}"},
        "spec": {"hostname": f"n{i}", "ip": ip, "role": roles},
    }


def _networking(pod_subnet: str | None, nodes: int) -> dict[str, Any]:
    if pod_subnet == FIT:
        pod_subnet = None if nodes <= _DEFAULT_FITS else _BIG_POD_SUBNET
    return {"networking": {"podSubnet": pod_subnet}} if pod_subnet else {}


def synth_spec_text(nodes: int, **kw: Any) -> str:
    return yaml.safe_dump_all(synth_docs(nodes, **kw), sort_keys=False)
