"""Before a lab starts anything: are its node addresses, ports and hostnames its own?

Two failures this refuses up front, with the field to change:
- Another lab (another workdir) is serving the same loopback addresses, or any program holds
  one of a node's component ports: otherwise etcd crash-loops on "address already in use"
  while the health checks are answered by the other lab, and both report success.
- The workdir already holds a node of the same hostname for another cluster: each node's root
  is `<workdir>/hosts/<hostname>/` and its agent is keyed by hostname, so the second cluster's
  agents were never started and its install waited at "0/4 agents registered".

Claims are files, so that two `bke lab` processes (and an operator) see the same truth:
    <workdir>/lab-nodes.json          {hostname: {"cluster", "ip"}} of this lab
    <registry>/<ip>.json              {"workdir", "cluster", "hostname", "at"} for each address
The registry (BKE_LAB_REGISTRY, default `<tmp>/bke-lab-<uid>`) is shared by every lab of this
user; a claim counts while its lab has a live process (processes.json), or while it is younger
than CLAIM_GRACE_S and its lab has recorded no process since (it is still starting). Check and
claim run under one lock.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from bke.core.plan import Plan
from bke.core.plan.ports import node_ports
from bke.adapters.runtime.processes import pid_alive, port_is_free

__all__ = ["CLAIM_GRACE_S", "NODES_FILE", "claim_lab", "lab_problems_on_host", "registry_dir"]

NODES_FILE = "lab-nodes.json"
# A lab writes its claims before it starts NATS, Redis, the services and agents (a few seconds);
# within this window a claim counts although the lab has no live process yet.
CLAIM_GRACE_S = 120.0
PortFree = Callable[[str, int], bool]


def registry_dir() -> Path:
    default = Path(tempfile.gettempdir()) / f"bke-lab-{os.getuid()}"
    return Path(os.environ.get("BKE_LAB_REGISTRY") or default)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _write_json(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=2, sort_keys=True))
    tmp.replace(path)


def _live_agents(workdir: Path) -> set[str]:
    pids = _read_json(workdir / "processes.json")
    return {h for h, pid in (pids.get("agents") or {}).items() if isinstance(pid, int) and pid_alive(pid)}


def _lab_is_up(workdir: Path) -> bool:
    pids = _read_json(workdir / "processes.json")
    every = [p for group in pids.values() if isinstance(group, dict) for p in group.values()]
    return any(isinstance(p, int) and pid_alive(p) for p in every)


def _starting(workdir: Path, claim: dict[str, Any], now: float) -> bool:
    """Claimed moments ago and its processes not yet recorded (a `bke lab down` rewrites the
    file, which ends the grace at once)."""
    at = float(claim.get("at", 0))
    try:
        recorded_since = (workdir / "processes.json").stat().st_mtime >= at
    except OSError:
        recorded_since = False
    return now - at < CLAIM_GRACE_S and not recorded_since


def lab_problems_on_host(workdir: Path, plan: Plan, registry: Path, now: float,
                         port_free: PortFree = port_is_free) -> list[str]:
    """Every reason this lab cannot start here, field path first; empty when it may."""
    workdir = workdir.resolve()
    out: list[str] = []
    recorded = _read_json(workdir / NODES_FILE)
    ours = _live_agents(workdir)
    for i, node in enumerate(plan.nodes):
        h = node.hostname
        mine = recorded.get(h) if isinstance(recorded.get(h), dict) else None
        # 1. the hostname belongs to another cluster of this workdir (its root, its agent)
        if mine is not None and mine.get("cluster") != plan.cluster:
            state = "its agent is running" if h in ours else "its node root is still on disk"
            out.append(f"nodes[{i}].spec.hostname: {h!r} is already a node of cluster {mine.get('cluster')!r} in lab "
                       f"{workdir} ({state}: hosts/{h}/); use other hostnames or another --workdir")
            continue
        # 2. another lab serves this address
        claim = _read_json(registry / f"{node.ip}.json")
        other = Path(str(claim.get("workdir", ""))) if claim else None
        if other is not None and other != workdir and (_lab_is_up(other) or _starting(other, claim, now)):
            out.append(f"nodes[{i}].spec.ip: {node.ip} is served by the lab in {other} (cluster {claim.get('cluster')!r}, "
                       f"node {claim.get('hostname')!r}); stop it (`bke lab down --workdir {other}`) or use other addresses")
            continue
        # 3. any program on the node's ports, unless this lab's own agent for the node runs them
        if mine is not None and h in ours:
            continue
        busy = [f"{port} ({what})" for port, what in node_ports(plan, node).items() if not port_free(node.ip, port)]
        if busy:
            out.append(f"nodes[{i}].spec.ip: port(s) in use on {node.ip}: {', '.join(busy)}; another program (or a lab "
                       "not started by this user) listens there, and the node's components would fail with "
                       "'address already in use'; free them or use other addresses")
    return out


@contextlib.contextmanager
def _locked(registry: Path) -> Iterator[None]:
    registry.mkdir(parents=True, exist_ok=True)
    with open(registry / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def claim_lab(workdir: Path, plan: Plan, *, registry: Path | None = None, now: float | None = None,
              port_free: PortFree = port_is_free) -> list[str]:
    """Check that this lab's addresses, ports and hostnames are its own and, if so, claim them
    (idempotent: re-running an install of the same lab passes and re-claims). Returns the
    problems; nothing is claimed when there is any."""
    registry = registry or registry_dir()
    at = time.time() if now is None else now
    workdir = workdir.resolve()
    with _locked(registry):
        problems = lab_problems_on_host(workdir, plan, registry, at, port_free)
        if problems:
            return problems
        workdir.mkdir(parents=True, exist_ok=True)
        recorded = _read_json(workdir / NODES_FILE)
        for node in plan.nodes:
            recorded[node.hostname] = {"cluster": plan.cluster, "ip": node.ip}
            _write_json(registry / f"{node.ip}.json",
                        {"workdir": str(workdir), "cluster": plan.cluster, "hostname": node.hostname, "at": at})
        _write_json(workdir / NODES_FILE, recorded)
    return []
