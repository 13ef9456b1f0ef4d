"""The upgrade's two renders, in a process of their own: `python -m bke_upgrader.render_child`.

Why a process: rendering a 5,000-node plan is pure Python (Jinja, parse-back checks), about
1.8 s of CPU per plan. In a thread of the upgrader it held the GIL against the event loop
that sends the first batches at the same time: every socket write, select and signature
(each releases the GIL) then waited for the render thread's switch interval, and the agents
step's first batches took 9 s instead of 1.5 s (bench/upgrade.py, 5,000 nodes).

Stdin: `{"old": <plan JSON>, "new": <plan JSON>, "vrrp": <the cluster's VRRP password or null>}`
(a pipe, never argv or the environment: the password is a secret). Stdout: a pickle (the parent is the same
code from the same installation, and the only writer of this pipe) of either

    ("ok", old, new, addons, peak_rss_kb, cpu_s)    old/new: host -> path -> RenderedFile, only
                                                    the files whose bytes or mode differ between
                                                    the renders (what node commands carry), equal
                                                    contents shared once; cpu_s: its own CPU
                                                    seconds (the parent logs them)
    ("error", "Type: message")                      the plan does not render (a permanent failure)
"""
from __future__ import annotations

import json
import pickle
import resource
import sys

from bke.core.plan import Plan
from bke.core.render import RenderInputs, render_cluster
from bke.core.render.result import RenderedFile

__all__ = ["changed_only", "main", "render_by_node"]

# keepalived.conf's password when none is given (a cluster without a VIP, where no node runs
# keepalived; or none stored, and then the parent sends no keepalived.conf: ClusterRenders.vrrp)
_NO_VRRP = "00000000"

Files = dict[str, dict[str, RenderedFile]]  # hostname -> path -> file


def render_by_node(plan: Plan, vrrp_password: str | None = None) -> tuple[Files, dict[str, str]]:
    """Every node's files, and the addons' manifests by name."""
    rendered = render_cluster(plan, RenderInputs(vrrp_password=vrrp_password or _NO_VRRP))
    files = {n.hostname: {f.path: f for f in n.files} for n in rendered.nodes}
    addons = {f.path.removesuffix(".yaml"): f.content.decode() for f in rendered.addons}
    return files, addons


def changed_only(old: Files, new: Files) -> tuple[Files, Files]:
    """Per node, the new render's files whose bytes or mode differ from the old render's (or
    that are new), and the old render's version of those, and of the files the new render no
    longer has (a control-plane component moved away: node_commands removes its manifest).
    `node_commands.changed_files` over
    these gives what it gives over the whole renders; the unchanged rest (most of a worker's
    files) never leaves this process. Equal contents become one object, pickled once."""
    shared: dict[bytes, bytes] = {}

    def one(f: RenderedFile) -> RenderedFile:
        return RenderedFile(f.path, f.mode, shared.setdefault(f.content, f.content), f.secret)

    old_out: Files = {}
    new_out: Files = {}
    for host, files in new.items():
        before = old.get(host, {})
        changed = {p: f for p, f in files.items()
                   if (b := before.get(p)) is None or b.content != f.content or b.mode != f.mode}
        new_out[host] = {p: one(f) for p, f in changed.items()}
        old_out[host] = {p: one(before[p]) for p in changed if p in before}
        old_out[host].update({p: one(b) for p, b in before.items() if p not in files})
    return old_out, new_out


def main() -> int:
    doc = json.loads(sys.stdin.buffer.read())
    try:
        old_files, _ = render_by_node(Plan.model_validate_json(doc["old"]), doc.get("vrrp"))
        new_files, addons = render_by_node(Plan.model_validate_json(doc["new"]), doc.get("vrrp"))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the step with it
        out: tuple = ("error", " ".join(f"{type(exc).__name__}: {exc}".split()))
    else:
        old_changed, new_changed = changed_only(old_files, new_files)
        use = resource.getrusage(resource.RUSAGE_SELF)
        out = ("ok", old_changed, new_changed, addons, use.ru_maxrss, use.ru_utime + use.ru_stime)
    sys.stdout.buffer.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
