"""`bke plan SPEC [-o table|json]`: print where every component runs."""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from bke.core.plan import Plan

from .spec_input import plan_or_exit

__all__ = ["plan"]


class PlanFormat(str, Enum):
    table = "table"
    json = "json"


def plan(
    spec: Path = typer.Argument(..., help="multi-document YAML: one BKECluster + BKENodes"),
    output: PlanFormat = typer.Option(PlanFormat.table, "-o", "--output", help="table or json"),
) -> None:
    """Validate SPEC and print the placement plan."""
    p = plan_or_exit(spec)
    if output is PlanFormat.json:
        print(json.dumps(p.public_view(), indent=2))
        return
    render_table(p, Console())


def render_table(p: Plan, console: Console) -> None:
    console.print(
        f"cluster [bold]{p.cluster}[/] kubernetes {p.kubernetes_version} etcd {p.etcd_version} "
        f"containerd {p.containerd_version} endpoint {p.control_plane_endpoint}"
        + (f" (VIP: haproxy + keepalived, {p.spec.config.load_balancer.vrrp} VRRP)" if p.load_balancer
           else " (external load balancer)" if p.spec.config.load_balancer.type == "external" else "")
    )
    nodes = Table("node", "ip", "roles", "components", "labels / taints")
    for n in p.nodes:
        marks = [k.removeprefix("node-role.kubernetes.io/") for k in n.labels if k.startswith("node-role.")]
        marks += [f"taint {t.key}:{t.effect}" for t in n.taints]
        if not n.registers:
            marks = ["(standalone kubelet, not registered)"]
        nodes.add_row(n.hostname, n.ip, ",".join(n.roles), ", ".join(n.components), ", ".join(marks))
    console.print(nodes)
    etcd = Table("etcd cluster", "members", "client/peer/metrics", "resources")
    for c in p.etcd_clusters:
        etcd.add_row(
            c.name,
            ", ".join(m.hostname for m in c.members),
            f"{c.client_port}/{c.peer_port}/{c.metrics_port}",
            ", ".join(c.resources),
        )
    console.print(etcd)
    console.print(f"--etcd-servers={p.apiserver.etcd_servers}", soft_wrap=True)
    if p.apiserver.etcd_servers_overrides:
        console.print(f"--etcd-servers-overrides={p.apiserver.etcd_servers_overrides}", soft_wrap=True)
