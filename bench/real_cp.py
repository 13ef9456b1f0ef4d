"""A real-control-plane install at scale: one real master (kube-apiserver, controller-manager,
scheduler and etcd from the built binaries, run by a real lab agent), N-1 workers as a fleet of
null agents in this process, their Nodes registered with the admin credential and kept Ready by
kwok. The install's node-labels and health phases then work on N real Node objects.

    .venv/bin/python bench/install.py --control-plane real --nodes 100 1000

Used by `bench/install.py --control-plane real` and tests/e2e/test_lab_real_scale.py. Needs
`python3 dev.py kube`.
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bke.adapters.bus import EventWatch, put_blob
from bke.adapters.runtime import RuntimeInfo
from bke.adapters.bus.connect import connect_nats
from bke.adapters.bus.streams import OBJECT_BUCKET
from bke.contracts import INSTALL_CLUSTER, InstallCluster
from bke.lab.kube_binaries import BUILDS
from bke.lab.kwok import wait_admin_kubeconfig
from bke.lab.kwok_nodes import admin_client, register_nodes, wait_allowed, wait_api
from bke.lab.supervisor import LabSupervisor
from bke.lab.key_files import lab_key_file
from bke.lab.trust import ensure_lab_command_key
from bke.core.plan import Plan, plan_spec_text
from bke.adapters.provisioning import provision_agents
from bke.core.secrets import load_secret_box
from bke.core.secrets.signing import parse_public_line
from bke.core.spec.synth import lab_ip, synth_spec_text
from bke_agent.fleet import Fleet
from bke_agent.settings import AgentSettings
from bke_cli.status_client import get_status

__all__ = ["KUBERNETES", "ETCD", "ETCD_35", "NEWER", "RealLab", "kwok_pid", "pod_pids", "proc_cpu_s", "real_install", "row", "summary"]

KUBERNETES = next(b.version for b in BUILDS if b.name == "kubernetes")
ETCD = next(b.version for b in BUILDS if b.name == "etcd" and b.version.startswith("3.6"))
ETCD_35 = next(b.version for b in BUILDS if b.name == "etcd" and b.version.startswith("3.5"))  # to upgrade from
NEWER = [b.version for b in BUILDS if b.name == "kubernetes"][-1]  # the newer built minor, to upgrade to
BASE = 150  # 127.150.x.y: no other lab of the tests or benches uses it


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process (/proc/<pid>/stat fields 14 and 15)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc(pid: int | None) -> dict[str, float]:
    """CPU seconds and peak RSS (MiB) of a live process."""
    if not pid:
        return {"cpu_s": 0.0, "peak_mib": 0.0}
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {"cpu_s": 0.0, "peak_mib": 0.0}
    hwm = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return {"cpu_s": proc_cpu_s(pid), "peak_mib": hwm / 1024}


def pod_pids(pods: Path) -> dict[str, int]:
    """The pid of each real pod the lab's kubelet stand-in runs (its pods/<pod>.json)."""
    out = {}
    for f in pods.glob("*.json"):
        try:
            pid = json.loads(f.read_text()).get("pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int):
            out[f.stem] = pid
    return out


def kwok_pid(sup: LabSupervisor, cluster: str) -> int | None:
    """The kwok binary's pid: the child of the cluster's kwok runner (bke.lab.kwok), which starts
    it again when it exits."""
    runner = sup.pids().get("kwok", {}).get(cluster)
    try:
        return int(Path(f"/proc/{runner}/task/{runner}/children").read_text().split()[0]) if runner else None
    except (OSError, IndexError):
        return None


async def _phases(nc: Any, cluster: str) -> dict[str, float]:
    doc = await get_status(nc, cluster, "none")
    out = {}
    for p in doc.phases if doc else []:
        if p.started_at and p.finished_at:
            out[p.name] = (datetime.fromisoformat(p.finished_at) - datetime.fromisoformat(p.started_at)).total_seconds()
    return out


@dataclass
class RealLab:
    """The installed lab, still running inside real_install's block (bench/real_upgrade.py goes on
    from here)."""

    sup: LabSupervisor
    info: RuntimeInfo
    nc: Any
    js: Any
    fleet: Fleet
    cluster: str
    plan: Plan
    pods: Path  # the master's pods/<pod>.json (pod_pids)


@asynccontextmanager
async def real_install(nodes: int, workdir: Path, timeout_s: float = 3600.0, *, kubernetes: str = KUBERNETES,
                       etcd: str = ETCD) -> AsyncIterator[dict[str, Any]]:
    """Install a cluster of `nodes` (one real master) at built releases of Kubernetes and etcd and
    yield what was measured; the lab is up inside the block (its admin.conf at
    result["admin_conf"], its handles at result["lab"]) and torn down after it."""
    os.environ["BKE_DISPATCHER_HEALTH_INTERVAL_S"] = "0"
    sup = LabSupervisor(workdir, auth=False, control_plane="real")  # the fleet shares one connection
    info = sup.ensure_runtime()
    sup.ensure_services(info)
    cluster = f"real{nodes}"
    text = synth_spec_text(nodes, name=cluster, masters=1, kubernetes=f"v{kubernetes}", etcd=f"v{etcd}", base=BASE)
    plan = plan_spec_text(text.encode()).plan
    assert plan is not None
    workers = [(f"n{i}", lab_ip(i, BASE)) for i in range(1, nodes)]
    nc = await connect_nats(info.nats_url)
    js = nc.jetstream(timeout=30)
    fleet: Fleet | None = None
    registrar: asyncio.Task[dict[str, float]] | None = None
    try:
        await sup.wait_services_ready(js)
        sup.ensure_agents(info, plan, only=["n0"])  # the master: a real agent, its kubelet runs the control plane
        sup.ensure_kwok(info, plan)
        base = AgentSettings(cluster=cluster, node="n1", backend="host", nats_url=info.nats_url, heartbeat_s=0)
        command_key = parse_public_line(ensure_lab_command_key(info, sup.workdir))
        fleet = Fleet.null(nc, js, base, [h for h, _ in workers], command_key=command_key)
        await provision_agents(nc, cluster, fleet.identities())

        async def register() -> dict[str, float]:
            conf = await wait_admin_kubeconfig(info.redis_url, cluster, load_secret_box(lab_key_file(sup.workdir, "api")), timeout_s)
            server, client = admin_client(conf)
            try:
                await wait_api(server, client, timeout_s)
                await wait_allowed(server, client, "create", "nodes", timeout_s)
                t = time.perf_counter()
                created = await register_nodes(server, client, workers, f"v{kubernetes}")
                return {"registered": created, "register_s": time.perf_counter() - t}
            finally:
                await client.aclose()

        async with EventWatch(nc, [f"bke.v1.install.{cluster}.finished"]) as watch:
            t0 = time.perf_counter()
            setup = await fleet.start()
            ref = await put_blob(js, OBJECT_BUCKET, f"specs/{cluster}.yaml", text.encode())
            registrar = asyncio.create_task(register())
            await js.publish(INSTALL_CLUSTER, InstallCluster(request_id=cluster, spec_ref=ref).to_bytes())
            finished = asyncio.create_task(watch.wait_for(lambda e: True, timeout=timeout_s))
            await asyncio.wait([registrar, finished], return_when=asyncio.FIRST_COMPLETED)
            if registrar.done() and registrar.exception() is not None:
                finished.cancel()
                raise RuntimeError(f"registering the workers' Nodes failed: {registrar.exception()!r}")
            done = await finished
            total = time.perf_counter() - t0
        reg = await asyncio.wait_for(registrar, 60)
        phases = await _phases(nc, cluster)
        pods = sup.workdir / "hosts" / "n0" / "var/lib/bke-lab/pods"
        pids = pod_pids(pods)
        yield {
            "status": done.data["status"], "reason": " ".join(x for x in (done.data.get("phase") or "", done.data.get("message") or "") if x), "nodes": nodes, "total": total,
            "setup": setup, **reg, "phases": phases,
            "labels_health_s": phases.get("node-labels", 0.0) + phases.get("health", 0.0),
            "apiserver": _proc(pids.get("kube-apiserver")),
            "etcd": _proc(next((pid for name, pid in sorted(pids.items()) if name.startswith("etcd")), None)),
            "kwok": _proc(kwok_pid(sup, cluster)),
            "admin_conf": sup.workdir / "hosts" / "n0" / "etc/kubernetes/admin.conf",
            "lab": RealLab(sup, info, nc, js, fleet, cluster, plan, pods),
        }
    finally:
        if registrar is not None and not registrar.done():
            registrar.cancel()
        if fleet is not None:
            await fleet.stop(grace=1.0)
        await nc.close()
        sup.down()


def row(r: dict[str, Any]) -> dict[str, str]:
    """The figures `summary` prints, one column each (bench/install.py's `--json` record)."""
    return {
        "N": f"{r['nodes']:,}", "install": f"{r['total']:.1f} s",
        "status": r["status"] + (": " + r["reason"] if r["reason"] else ""),
        "labels + health": f"{r['labels_health_s']:.1f} s",
        "Nodes registered": f"{r.get('registered', 0)} in {r.get('register_s', 0):.1f} s",
        **{name: f"{r[name]['cpu_s']:.0f} CPU-s, peak {r[name]['peak_mib']:.0f} MiB" for name in ("apiserver", "etcd", "kwok")},
        "phases (s)": ", ".join(f"{k} {v:.1f}" for k, v in r["phases"].items()),
    }


def summary(r: dict[str, Any]) -> str:
    ph = ", ".join(f"{k} {v:.1f}" for k, v in r["phases"].items())
    return (f"N={r['nodes']:>6}  real control plane: install {r['total']:.1f} s ({r['status']}{': ' + r['reason'] if r['reason'] else ''}); "
            f"labels + health {r['labels_health_s']:.1f} s; {r.get('registered', 0)} Nodes registered in "
            f"{r.get('register_s', 0):.1f} s\n"
            f"         apiserver {r['apiserver']['cpu_s']:.0f} CPU-s, peak {r['apiserver']['peak_mib']:.0f} MiB; "
            f"etcd {r['etcd']['cpu_s']:.0f} CPU-s, peak {r['etcd']['peak_mib']:.0f} MiB; "
            f"kwok {r['kwok']['cpu_s']:.0f} CPU-s, peak {r['kwok']['peak_mib']:.0f} MiB\n"
            f"         phases (s): {ph}")
