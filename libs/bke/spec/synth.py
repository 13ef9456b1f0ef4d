"""Generated specs for tests and benchmarks: N nodes on 127.x loopback addresses."""
from __future__ import annotations

from typing import Any

import yaml

from .models import API_VERSION

__all__ = ["synth_docs", "synth_spec_text", "lab_ip"]


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
) -> list[dict[str, Any]]:
    """`masters` masters (master/node + etcd unless split), the rest workers; with `split`,
    three etcd-events and three etcd-pods nodes and the apiserver on the first master only."""
    docs: list[dict[str, Any]] = []
    roles: list[list[str]] = []
    for i in range(nodes):
        if i < masters:
            r = ["master", "etcd"] if not split else ["master", "etcd"] + (["apiserver"] if i == 0 else [])
        elif split and i < masters + 3:
            r = ["etcd-event"]
        elif split and i < masters + 6:
            r = ["etcd-pod"]
        else:
            r = ["node"]
        roles.append(r)
    first_ip = lab_ip(0, base)
    docs.append(
        {
            "apiVersion": API_VERSION,
            "kind": "BKECluster",
            "metadata": {"name": name},
            "spec": {
                "controlPlaneEndpoint": {"host": first_ip, "port": 6443},
                "clusterConfig": {
                    "cluster": {
                        "kubernetesVersion": kubernetes,
                        "etcdVersion": etcd,
                        "containerdVersion": containerd,
                        "certificates": {"keyAlgorithm": key_algorithm},
                    }
                },
            },
        }
    )
    for i, r in enumerate(roles):
        docs.append(
            {
                "apiVersion": API_VERSION,
                "kind": "BKENode",
                "metadata": {"name": f"{name}-n{i}"},
                "spec": {"hostname": f"n{i}", "ip": lab_ip(i, base), "role": r},
            }
        )
    return docs


def synth_spec_text(nodes: int, **kw: Any) -> str:
    return yaml.safe_dump_all(synth_docs(nodes, **kw), sort_keys=False)
