"""`bke versions [-o table|json] [--gates]`: the supported versions table, the template set that
serves each range, and (with --gates) the version gates of flags, feature gates and endpoints.

Everything printed comes from the data tables (bke.core.versions, bke.core.render.TEMPLATE_RANGES,
bke.core.render.GATES), so this output and the renderer cannot disagree.
"""
from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

from bke.core.render import GATES, TEMPLATE_RANGES
from bke.core.versions import CONTAINERD_MINORS, ETCD_MINORS, KUBERNETES

from .output import Fmt

__all__ = ["register", "versions", "versions_document"]



def register(app: typer.Typer) -> None:
    app.command("versions")(versions)


def _folder(family: str, minor: str) -> str:
    major, mi = (int(p) for p in minor.split("."))
    return next((r.folder for r in TEMPLATE_RANGES if r.family == family and r.covers(major, mi)), "-")


def versions_document() -> dict:
    return {
        "kubernetes": [{"minor": r.minor, "etcd": r.etcd, "coredns": r.coredns, "pause": r.pause,
                        "templates": _folder("kubernetes", r.minor)} for r in KUBERNETES.values()],
        "etcd": [{"minor": m, "templates": _folder("etcd", m)} for m in ETCD_MINORS],
        "containerd": [{"minor": m, "templates": _folder("containerd", m)} for m in CONTAINERD_MINORS],
        "gates": [{"component": g.component, "kind": g.kind, "name": g.name, "since": g.since, "until": g.until,
                   "instead": g.instead, "source": g.source} for g in GATES],
    }


def versions(
    output: Fmt = typer.Option(Fmt.table, "-o", "--output", help="table or json"),
    gates: bool = typer.Option(False, "--gates", help="also list the version gates of flags, feature gates, endpoints"),
) -> None:
    """Print the supported Kubernetes, etcd and containerd versions (any patch of a listed minor)."""
    doc = versions_document()
    if output is Fmt.json:
        print(json.dumps(doc if gates else {k: v for k, v in doc.items() if k != "gates"}, indent=2))
        return
    console = Console()
    k8s = Table("kubernetes", "etcd (upstream pairing)", "coredns", "pause", "templates", title="Kubernetes (any patch)")
    for r in doc["kubernetes"]:
        k8s.add_row(r["minor"], r["etcd"], r["coredns"], r["pause"], r["templates"])
    console.print(k8s)
    other = Table("component", "minor", "templates", title="etcd and containerd (any patch)")
    for comp in ("etcd", "containerd"):
        for r in doc[comp]:
            other.add_row(comp, r["minor"], r["templates"])
    console.print(other)
    if gates:
        t = Table("component", "kind", "name", "versions", "otherwise", title="Version gates")
        for g in GATES:
            t.add_row(g.component, g.kind, g.name, g.range_text, g.instead or "-")
        console.print(t)
