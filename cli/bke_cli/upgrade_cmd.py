"""`bke upgrade plan`: what an upgrade would change, in which order, and what refuses it.

Like `kubeadm upgrade plan`: every component's current and target version per node group, the
order of steps expanded for this cluster (batch counts, not one line per node), and the
findings of the pre-checks. The decisions are bke.upgrade's pure cores; this module only prints.
"""
from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from bke.plan import Plan
from bke.upgrade import (
    Facts,
    Report,
    Target,
    UpgradeRequestError,
    change_of,
    expand_order,
    resolve_target,
    upgrade_findings,
)
from bke.upgrade.order import ExpandedStep
from bke.versions import KUBERNETES, Version, parse_version

from .output import EXIT_INVALID, die, error_lines
from .spec_input import plan_or_exit

__all__ = ["register", "upgrade_plan_document"]

upgrade_app = typer.Typer(no_args_is_help=True, add_completion=False, help="Upgrades: plan (apply comes later).")


def register(app: typer.Typer) -> None:
    app.add_typer(upgrade_app, name="upgrade")


class Fmt(str, Enum):
    table = "table"
    json = "json"


def _components(p: Plan, t: Target) -> list[dict[str, Any]]:
    """(component, node group, nodes, current, target) rows, control plane first."""
    cur_row = KUBERNETES.get(parse_version(p.kubernetes_version).minor_key)
    new_row = KUBERNETES.get(t.kubernetes.minor_key)
    rows: list[dict[str, Any]] = []

    def add(component: str, group: str, nodes: int, current: str, target: str | Version) -> None:
        rows.append({"component": component, "group": group, "nodes": nodes, "current": current.lstrip("v"),
                     "target": str(target).lstrip("v")})

    for c in p.etcd_clusters:
        add("etcd", c.name, len(c.members), p.etcd_version, t.etcd)
    for comp in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        add(comp, "control plane", len(p.nodes_running(comp)), p.kubernetes_version, t.kubernetes)
    add("kubelet", "all nodes", len(p.nodes), p.kubernetes_version, t.kubernetes)
    add("containerd", "all nodes", len(p.nodes), p.containerd_version, t.containerd)
    registered = sum(1 for n in p.nodes if n.registers)
    add("kube-proxy", "registered nodes", registered, p.kubernetes_version, t.kubernetes)
    if cur_row and new_row:
        add("coredns", "addon", 0, cur_row.coredns, new_row.coredns)
        add("pause", "all nodes", len(p.nodes), cur_row.pause, new_row.pause)
        if p.spec.config.cni == "calico":
            add("calico", "addon", 0, cur_row.calico, new_row.calico)
    return rows


def _step_row(s: ExpandedStep) -> dict[str, Any]:
    return {"step": s.step, "group": s.group, "nodes": s.nodes, "batches": len(s.batches),
            "largestBatch": max((len(b) for b in s.batches), default=0), "drain": s.drain}


def upgrade_plan_document(p: Plan, t: Target, report: Report, order: list[ExpandedStep]) -> dict[str, Any]:
    return {
        "cluster": p.cluster,
        "components": _components(p, t),
        "order": [_step_row(s) for s in order],
        "findings": [{"name": f.name, "kind": f.kind, "message": f.message, "nodes": list(f.nodes)}
                     for f in report.findings],
        "ignored": list(report.ignored),
        "leftOut": list(report.left_out),
        "notChecked": list(report.not_checked),
        "refused": report.refused,
        "reasons": report.reasons(),
    }


def _print_tables(doc: dict[str, Any], console: Console) -> None:
    comps = Table("component", "node group", "nodes", "current", "target", title=f"Upgrade plan for {doc['cluster']}")
    for r in doc["components"]:
        same = r["current"] == r["target"]
        comps.add_row(r["component"], r["group"], str(r["nodes"] or "-"), r["current"],
                      r["target"] + (" (unchanged)" if same else ""))
    console.print(comps)
    order = Table("#", "step", "group", "nodes", "batches", "largest batch", "drain", title="Order")
    for i, s in enumerate(doc["order"], 1):
        order.add_row(str(i), s["step"], s["group"] or "-", str(s["nodes"] or "-"), str(s["batches"] or "-"),
                      str(s["largestBatch"] or "-"), "yes" if s["drain"] else "")
    console.print(order)
    if doc["findings"]:
        t = Table("check", "kind", "finding", title="Findings")
        for f in doc["findings"]:
            kind = f["kind"] + (" (ignored)" if f["name"] in doc["ignored"] else "")
            t.add_row(f["name"], kind, f["message"])
        console.print(t)
    else:
        console.print("no findings")
    if doc["notChecked"]:
        console.print(f"not checked offline: {', '.join(doc['notChecked'])} "
                      "(they need the live cluster: the upgrader checks them before it starts)")
    if doc["leftOut"]:
        console.print(f"left out: {len(doc['leftOut'])} node(s), upgraded later with `bke retry --nodes`")


@upgrade_app.command("plan")
def plan(
    spec: Path = typer.Option(..., "--spec", help="the cluster's current spec (multi-document YAML)"),
    to: str = typer.Option(..., "--to", help="target Kubernetes version, e.g. v1.34.1"),
    etcd_version: Optional[str] = typer.Option(None, "--etcd-version",
                                               help="target etcd (default: the target minor's pairing in `bke versions`)"),
    containerd_version: Optional[str] = typer.Option(None, "--containerd-version",
                                                     help="target containerd (default: the running one)"),
    ignore_check: list[str] = typer.Option([], "--ignore-check", help="a skippable check to override (repeatable)"),
    max_unavailable: Optional[str] = typer.Option(None, "--max-unavailable",
                                                  help="workers per batch: N or N% (default: the larger of 1 and 10%)"),
    output: Fmt = typer.Option(Fmt.table, "-o", "--output", help="table or json"),
) -> None:
    """Print what upgrading the cluster to --to would change, in which order, and the checks' findings.

    The current state is read from --spec (the spec the cluster was installed from); the upgrader service \
will read it from the cluster's stored plan instead.

    Checks that need the live cluster (health, live agents, certificate expiry, cgroup v1 hosts) are \
reported as not checked offline. Exit 2, with the reasons, when the upgrade is refused."""
    p = plan_or_exit(spec)
    try:
        target = resolve_target(p, to, etcd_version, containerd_version)
        report = upgrade_findings(p, target, Facts(), ignore_check)
        order = expand_order(p, change_of(p, target), max_unavailable, report.left_out)
    except (UpgradeRequestError, ValueError) as exc:
        die(str(exc), EXIT_INVALID)
    doc = upgrade_plan_document(p, target, report, order)
    if output is Fmt.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_tables(doc, Console())
    if report.refused:
        error_lines(doc["reasons"])
        raise SystemExit(EXIT_INVALID)
