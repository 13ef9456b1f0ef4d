"""`bke upgrade plan`: what an upgrade would change, in which order, and what refuses it.

Like `kubeadm upgrade plan`: every component's current and target version per node group, the
order of steps expanded for this cluster (batch counts, not one line per node), and the
findings of the pre-checks. The decisions are bke.core.upgrade's pure cores; this module only prints.
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any, Optional

import typer

from bke.contracts.drain import DrainOptions
from rich.console import Console
from rich.table import Table

from bke.core.plan import Plan
from bke.core.upgrade import (
    Facts,
    Report,
    Target,
    UpgradeRequestError,
    change_of,
    expand_order,
    resolve_target,
    upgrade_findings,
)
from bke.core.upgrade.order import ExpandedStep
from bke.core.versions import KUBERNETES, Version, parse_version

from bke.contracts.upgrade import UPGRADE_GET, GetUpgrade, RetryUpgrade, UpgradeCluster, UpgradeView
from bke.contracts.status import StatusError

from .ask import ask_view
from .drain_flags import DRAIN_EMPTYDIR, DRAIN_FORCE, drain_options
from .connect import resolve_nats
from .output import EXIT_FAILURE, EXIT_INVALID, Fmt, die, error_lines
from .spec_input import plan_or_exit
from .upgrade_follow import progress_line, upgrade_and_follow

__all__ = ["register", "retry_upgrade", "upgrade_exists", "upgrade_plan_document"]

upgrade_app = typer.Typer(no_args_is_help=True, add_completion=False,
                          help="Upgrades: plan, apply (through the upgrader service), status.")
WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory")
NATS = typer.Option(None, "--nats", help="NATS URL (or BKE_NATS_URL)")


def register(app: typer.Typer) -> None:
    app.add_typer(upgrade_app, name="upgrade")



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
    name: Optional[str] = typer.Argument(None, help="the cluster, asked of the upgrader (with --workdir or --nats): "
                                         "its stored plan and live checks"),
    spec: Optional[Path] = typer.Option(None, "--spec", help="offline: the cluster's current spec (multi-document YAML)"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
    to: str = typer.Option(..., "--to", help="target Kubernetes version, e.g. v1.34.1"),
    etcd_version: Optional[str] = typer.Option(None, "--etcd-version",
                                               help="target etcd (default: the target minor's pairing in `bke versions`)"),
    containerd_version: Optional[str] = typer.Option(None, "--containerd-version",
                                                     help="target containerd (default: the running one)"),
    ignore_check: list[str] = typer.Option([], "--ignore-check", help="a skippable check to override (repeatable)"),
    max_unavailable: Optional[str] = typer.Option(None, "--max-unavailable",
                                                  help="workers per batch: N or N% (default: the larger of 1 and 10%)"),
    certificate_renewal: bool = typer.Option(True, "--certificate-renewal/--no-certificate-renewal",
                                             help="renew the certificates of the components upgraded, as kubeadm does "
                                                  "(default on)"),
    output: Fmt = typer.Option(Fmt.table, "-o", "--output", help="table or json"),
) -> None:
    """Print what upgrading the cluster to --to would change, in which order, and the checks' findings.

    The current state is read from --spec (the spec the cluster was installed from); the upgrader service \
will read it from the cluster's stored plan instead.

    Checks that need the live cluster (health, live agents, certificate expiry, cgroup v1 hosts) are \
reported as not checked offline. With NAME (and --workdir or --nats) the upgrader answers instead: the \
stored plan, every check on live facts, nothing started. Exit 2, with the reasons, when the upgrade is refused."""
    if name is not None:
        req = _request(name, to, etcd_version, containerd_version, ignore_check, max_unavailable, dry_run=True,
                       renew=certificate_renewal)
        raise SystemExit(asyncio.run(upgrade_and_follow(resolve_nats(workdir, nats_url), req, 60.0, Console())))
    if spec is None:
        die("say which cluster: NAME with --workdir/--nats (asks the upgrader), or --spec FILE (offline)", EXIT_INVALID)
    p = plan_or_exit(spec)
    try:
        target = resolve_target(p, to, etcd_version, containerd_version)
        report = upgrade_findings(p, target, Facts(renew_certificates=certificate_renewal), ignore_check)
        change = dataclasses.replace(change_of(p, target), certificates=certificate_renewal)
        order = expand_order(p, change, max_unavailable, report.left_out)
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


def _request(name: str, to: str, etcd: Optional[str], containerd: Optional[str], ignore: list[str],
             max_unavailable: Optional[str], *, dry_run: bool = False, drain_timeout: float = 300.0,
             renew: bool = True, drain: DrainOptions | None = None) -> UpgradeCluster:
    try:
        return UpgradeCluster(request_id=str(uuid.uuid4()), cluster=name, kubernetes_version=to, etcd_version=etcd,
                              containerd_version=containerd, ignore_checks=ignore, max_unavailable=max_unavailable,
                              drain_timeout_s=drain_timeout, dry_run=dry_run, renew_certificates=renew, drain=drain)
    except ValueError as exc:  # pydantic: a malformed version names its field
        die(" ".join(str(exc).split()), EXIT_INVALID)
        raise  # unreachable: die exits


@upgrade_app.command("apply")
def apply(
    name: str = typer.Argument(..., help="the cluster"),
    to: str = typer.Option(..., "--to", help="target Kubernetes version, e.g. 1.34.1"),
    etcd_version: Optional[str] = typer.Option(None, "--etcd-version", help="target etcd (default: the versions table's pairing)"),
    containerd_version: Optional[str] = typer.Option(None, "--containerd-version", help="target containerd (default: the running one)"),
    ignore_check: list[str] = typer.Option([], "--ignore-check", help="a skippable check to override (repeatable)"),
    max_unavailable: Optional[str] = typer.Option(None, "--max-unavailable", help="workers per batch: N or N%"),
    drain_timeout: float = typer.Option(300.0, "--drain-timeout", help="seconds a node's drain may take"),
    drain_force: bool = DRAIN_FORCE,
    drain_delete_emptydir_data: bool = DRAIN_EMPTYDIR,
    certificate_renewal: bool = typer.Option(True, "--certificate-renewal/--no-certificate-renewal",
                                             help="renew the certificates of the components upgraded, as kubeadm does "
                                                  "(default on)"),
    timeout: float = typer.Option(7200.0, "--timeout", help="seconds to follow before giving up"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """Upgrade the cluster through the upgrader service and follow it until it ends.

    Exit 0 upgraded, 2 refused (with every reason), 1 failed (the reason names the node and step; a node \
whose component did not come back healthy was rolled back)."""
    req = _request(name, to, etcd_version, containerd_version, ignore_check, max_unavailable, drain_timeout=drain_timeout,
                   renew=certificate_renewal, drain=drain_options(drain_force, drain_delete_emptydir_data))
    raise SystemExit(asyncio.run(upgrade_and_follow(resolve_nats(workdir, nats_url), req, timeout, Console())))


async def _get(access: Any, name: str) -> UpgradeView | StatusError:
    return await ask_view(access, UPGRADE_GET, GetUpgrade(cluster=name), UpgradeView)


def retry_upgrade(access: Any, name: str, nodes: list[str], timeout: float) -> int:
    """Send `RetryUpgrade` and follow it like an upgrade (also `bke retry`, for an upgrade)."""
    try:
        req = RetryUpgrade(request_id=str(uuid.uuid4()), cluster=name, nodes=nodes)
    except ValueError as exc:
        die(" ".join(str(exc).split()), EXIT_INVALID)
        raise  # unreachable: die exits
    return asyncio.run(upgrade_and_follow(access, req, timeout, Console()))


def upgrade_exists(access: Any, name: str) -> bool | None:
    """Whether the upgrader has an upgrade of the cluster (running or finished); None when no
    upgrader answers."""
    try:
        got = asyncio.run(_get(access, name))
    except Exception:  # noqa: BLE001 - no upgrader (a deployment may run without one)
        return None
    if isinstance(got, StatusError) and got.reason != "NotFound":
        die(got.message, EXIT_FAILURE)
    return isinstance(got, UpgradeView)


@upgrade_app.command("retry")
def retry(
    name: str = typer.Argument(..., help="the cluster"),
    nodes: Optional[str] = typer.Option(None, "--nodes", help="comma-separated hostnames (default: every node behind)"),
    timeout: float = typer.Option(7200.0, "--timeout", help="seconds to follow before giving up"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """Complete the cluster's last upgrade on nodes it left behind (left out, failed, rolled back, not reached).

    A new run of the same steps and rollback on those nodes only; no other node receives anything. A node \
that is not behind is refused, with what it runs. Exit 0 upgraded, 2 refused, 1 failed."""
    wanted = [n.strip() for n in nodes.split(",") if n.strip()] if nodes else []
    raise SystemExit(retry_upgrade(resolve_nats(workdir, nats_url), name, wanted, timeout))


@upgrade_app.command("status")
def status(
    name: str = typer.Argument(..., help="the cluster"),
    output: Fmt = typer.Option(Fmt.table, "-o", "--output", help="table or json"),
    workdir: Optional[Path] = WORKDIR,
    nats_url: Optional[str] = NATS,
) -> None:
    """The cluster's current or last upgrade, from the upgrader."""
    try:
        got = asyncio.run(_get(resolve_nats(workdir, nats_url), name))
    except Exception as exc:  # noqa: BLE001 - no upgrader answered
        die(f"no answer on {UPGRADE_GET}: {type(exc).__name__}: {exc}", EXIT_FAILURE)
    if isinstance(got, StatusError):
        die(got.message, EXIT_INVALID if got.reason in ("NotFound", "Invalid") else EXIT_FAILURE)
    assert isinstance(got, UpgradeView)
    doc = got.model_dump(mode="json", by_alias=True)
    if output is Fmt.json:
        print(json.dumps(doc, indent=2))
        return
    console = Console()
    console.print(progress_line(doc), markup=False, highlight=False)
    t = Table("step", "group", "status", "done", "total", "batches")
    for st in doc["steps"]:
        t.add_row(st["name"], st["group"] or "-", st["status"], str(st["done"]), str(st["total"]), str(st["batches"]))
    console.print(t)
    if doc["message"]:
        console.print(doc["message"], markup=False, highlight=False)
