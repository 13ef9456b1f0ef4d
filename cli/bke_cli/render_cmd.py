"""`bke render`: write every node's files, or show what a spec change would change.

    bke render SPEC --out DIR               DIR/<hostname>/<absolute node path>, next to `bke certs issue`
    bke render --diff OLD_SPEC NEW_SPEC     per node: files added, removed, changed [--patch]

The per-cluster VRRP password is generated once and kept in DIR/.bke/vrrp-password (0600);
DIR/.bke/rendered.json lists what was written, so a later render removes the files it no longer
produces (and never touches anything else, e.g. the certificates). Addon manifests go to
DIR/.bke/addons/. Exit codes: 0 ok, 2 refused input (unsupported version, denied flag, output
that fails validation), 1 operational failure (a file could not be written).
"""
from __future__ import annotations

import difflib
import json
import os
from pathlib import Path, PurePosixPath
from typing import Optional

import typer

from bke.core.plan import Plan
from bke.core.render import (InvalidOutputError, RenderError, RenderInputs, RenderRejected, RenderedCluster, RenderedFile,
                        diff_rendered,
                        generate_vrrp_password, render_cluster)

from bke.core.render.context import VRRP_PASSWORD_RE

from .output import EXIT_FAILURE, EXIT_INVALID, die, error_lines, warn_lines
from .spec_input import plan_or_exit

__all__ = ["register", "render"]

_DIFF_PASSWORD = "diffonly"  # both sides of --diff share it, so keepalived.conf differs only by real changes


def register(app: typer.Typer) -> None:
    app.command("render")(render)


def _render_or_exit(plan: Plan, password: str | None) -> RenderedCluster:
    try:
        return render_cluster(plan, RenderInputs(vrrp_password=password))
    except RenderRejected as exc:
        error_lines(f"{path}: {msg}" for path, msg in exc.errors)
        raise SystemExit(EXIT_INVALID) from None
    except InvalidOutputError as exc:
        error_lines(str(f) for f in exc.findings)
        raise SystemExit(EXIT_INVALID) from None
    except RenderError as exc:
        die(str(exc), EXIT_INVALID)


def _password(state: Path, plan: Plan, create: bool) -> str | None:
    if not plan.load_balancer:
        return None
    path = state / "vrrp-password"
    if path.exists():
        value = path.read_text().strip()
        if not VRRP_PASSWORD_RE.match(value):
            die(f"{path}: not a VRRP password (8 letters or digits); delete it to generate a new one", EXIT_INVALID)
        return value
    if not create:
        return _DIFF_PASSWORD
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    value = generate_vrrp_password()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value + "\n")
    return value


def _write(target: Path, content: bytes, mode: int) -> None:
    """Write next to the target, then rename: a reader never sees half a file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(content)
    os.chmod(tmp, mode)
    os.replace(tmp, target)


def _node_path(out: Path, host: str, path: str) -> Path:
    return out / host / PurePosixPath(path).relative_to("/")


def write_tree(out: Path, rendered: RenderedCluster) -> int:
    """Write node trees and addons; remove files of the previous render that are gone. Returns removed count."""
    state = out / ".bke"
    index_path = state / "rendered.json"
    previous = json.loads(index_path.read_text()) if index_path.exists() else {"nodes": {}}
    for node in rendered.nodes:
        for f in node.files:
            _write(_node_path(out, node.hostname, f.path), f.content, f.mode)
    for f in rendered.addons:
        _write(state / "addons" / f.path, f.content, f.mode)
    now = {n.hostname: sorted(f.path for f in n.files) for n in rendered.nodes}
    removed = 0
    for host, paths in previous.get("nodes", {}).items():
        for p in set(paths) - set(now.get(host, [])):
            target = _node_path(out, host, p)
            if target.exists():
                target.unlink()
                removed += 1
    _write(index_path, json.dumps({**rendered.meta_json(), "nodes": now}, indent=2, sort_keys=True).encode(), 0o600)
    return removed


def render(
    specs: list[Path] = typer.Argument(..., help="SPEC; or OLD_SPEC NEW_SPEC with --diff"),
    out: Optional[Path] = typer.Option(None, "--out", help="folder of node trees DIR/<hostname>/... (and DIR/.bke)"),
    diff: bool = typer.Option(False, "--diff", help="compare OLD_SPEC and NEW_SPEC: files added/removed/changed per node"),
    patch: bool = typer.Option(False, "--patch", help="with --diff: print a unified diff of every changed file (secrets excepted)"),
) -> None:
    """Render every node's static pods and configs (validated), or diff two specs."""
    if diff:
        if len(specs) != 2:
            die("--diff takes exactly two specs: OLD_SPEC NEW_SPEC", EXIT_INVALID)
        _diff(specs[0], specs[1], out, patch)
        return
    if len(specs) != 1 or out is None:
        die("usage: bke render SPEC --out DIR   (or: bke render --diff OLD_SPEC NEW_SPEC)", EXIT_INVALID)
    plan = plan_or_exit(specs[0])
    try:
        rendered = _render_or_exit(plan, _password(out / ".bke", plan, create=True))
        removed = write_tree(out, rendered)
    except OSError as exc:
        die(f"{type(exc).__name__}: {exc}", EXIT_FAILURE)
    print(f"cluster {rendered.cluster}: {rendered.file_count} files for {len(rendered.nodes)} nodes in {out} "
          f"(tier {rendered.tier}; templates {', '.join(rendered.template_sets)}; digest {rendered.digest[:12]})"
          + (f"; removed {removed} stale files" if removed else ""))
    warn_lines(w for w in rendered.warnings if w not in plan.warnings)  # plan_or_exit printed the plan's own


def _diff(old_spec: Path, new_spec: Path, out: Optional[Path], patch: bool) -> None:
    old_plan, new_plan = plan_or_exit(old_spec), plan_or_exit(new_spec)
    state = out / ".bke" if out else Path("/nonexistent")
    old = _render_or_exit(old_plan, _password(state, old_plan, create=False))
    new = _render_or_exit(new_plan, _password(state, new_plan, create=False))
    changed_nodes = 0
    for d in diff_rendered(old, new):
        if d.empty:
            continue
        changed_nodes += 1 if d.hostname else 0
        print(f"{d.hostname or '(addons)'}:")
        for label, paths in (("added", d.added), ("removed", d.removed), ("changed", d.changed)):
            for p in paths:
                print(f"  {label:<8}{p}")
                if patch and label == "changed":
                    _print_patch(old, new, d.hostname, p)
    total = len({n.hostname for n in old.nodes} | {n.hostname for n in new.nodes})
    print(f"{changed_nodes} of {total} nodes change" + ("" if old.digest != new.digest else " (identical output)"))


def _pick(c: RenderedCluster, host: str, path: str) -> RenderedFile | None:
    if not host:
        return next((f for f in c.addons if f.path == path), None)
    try:
        return c.node(host).file(path)
    except KeyError:
        return None


def _print_patch(old: RenderedCluster, new: RenderedCluster, host: str, path: str) -> None:
    a, b = _pick(old, host, path), _pick(new, host, path)
    if a is None or b is None or a.secret or b.secret:
        print("    (secret file: contents not shown)")
        return
    name = path if path.startswith("/") else "/" + path
    for line in difflib.unified_diff(a.content.decode().splitlines(), b.content.decode().splitlines(),
                                     f"old{name}", f"new{name}", lineterm=""):
        print(f"    {line}")
