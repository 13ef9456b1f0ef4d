"""A minor upgrade against one real control plane at scale, next to the null fleet's figure for
the same node count; bench/upgrade.py runs it.

    .venv/bin/python bench/upgrade.py --control-plane real --nodes 100 1000

For each N: bench/real_cp.py's install (one real master whose kube-apiserver, controller-manager,
scheduler and etcd are the built binaries, run by a real lab agent; N-1 workers as null agents of
a fleet in this process, their Nodes kept Ready by kwok) at the older built minor and etcd 3.5
(1.36.3, 3.5.36), then the upgrade `bke lab upgrade --to 1.37.2 --etcd-version 3.6.6` asks for,
with `--max-unavailable 10%` (`--to`, `--etcd-version`, `--max-unavailable` change them). Printed:

* ``upgrade``: from publishing the `UpgradeCluster` request to the `Succeeded` UpgradeChanged, and
  each step's time by UpgradeChanged arrival (etcd, the control-plane components, the master's
  and the workers' runtime with their drains, the addons: kube-proxy, and calico rolled out on
  every Node, one pod at a time as its DaemonSet says).
* ``drains``: the upgrader's own drain calls through the real API (a batch cordoned and drained, a
  batch uncordoned), timed inside its process (bench/profiling/sitecustomize.py, BKE_BENCH_DRAIN_LOG).
* ``CPU``: CPU seconds during the upgrade of the apiserver and etcd, and of the controller-manager,
  scheduler, kwok, the upgrader, the dispatcher, NATS and this process (the fleet). The upgrade
  replaces the control plane's processes: each is sampled every 0.5 s and every process the
  upgrade started counts from its start, so only an old process's last half-second is missed.
* ``null fleet``: bench/upgrade.py's own upgrade at the same N, run after the real one in the same
  invocation (3 masters and the simulated API; its versions, 1.33.2 -> 1.34.1, etcd 3.5.1 -> 3.5.2).
"""
from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from real_cp import ETCD_35, KUBERNETES, RealLab, kwok_pid, pod_pids, proc_cpu_s, real_install
from upgrade_events import TimedWatch, follow_upgrade, heartbeats, instrument_services, upgrade_figures, upgrade_subjects

from bke.contracts.upgrade import UpgradeCluster

__all__ = ["CpuSampler", "drain_figures", "real_row", "run_real_upgrade"]

ANSWER_TIMEOUT_S = 600.0
UPGRADE_TIMEOUT_S = 3600.0  # calico's rollout, one pod at a time, is most of it at 1,000 nodes
PROGRESS_EVERY_S = 60.0
SHOWN = ("kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "upgrader", "dispatcher", "nats")


class CpuSampler:
    """CPU seconds by name of processes that come and go (an upgrade replaces them): `pids()`
    (name -> pid) is read every `every_s`; a process alive at the start counts from its figure
    then, one started later from zero; what a process used after its last sample is missed."""

    def __init__(self, pids: Callable[[], dict[str, int | None]], every_s: float = 0.5):
        self.pids, self.every_s = pids, every_s
        self.first: dict[tuple[str, int], float] = {}
        self.last: dict[tuple[str, int], float] = {}
        self._task: asyncio.Task[None] | None = None

    def sample(self, start: bool = False) -> None:
        for name, pid in self.pids().items():
            cpu = proc_cpu_s(pid) if pid else 0.0
            if not pid or not cpu:
                continue  # not running now (between an old process and its successor)
            self.first.setdefault((name, pid), cpu if start else 0.0)
            self.last[(name, pid)] = max(cpu, self.last.get((name, pid), 0.0))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)  # a sampling period, not synchronisation
            self.sample()

    async def __aenter__(self) -> CpuSampler:
        self.sample(start=True)
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
        self.sample()

    def totals(self) -> dict[str, tuple[float, int]]:
        """name -> (CPU seconds, processes)."""
        out: dict[str, tuple[float, int]] = {}
        for (name, pid), cpu in self.last.items():
            s, n = out.get(name, (0.0, 0))
            out[name] = (s + cpu - self.first[(name, pid)], n + 1)
        return out


def _processes(lab: RealLab) -> Callable[[], dict[str, int | None]]:
    def pids() -> dict[str, int | None]:
        pods = {("etcd" if name.startswith("etcd") else name): pid for name, pid in pod_pids(lab.pods).items()}
        services = lab.sup.pids()["services"]
        return {**pods, "kwok": kwok_pid(lab.sup, lab.cluster), "nats": lab.info.nats_pid,
                "upgrader": services.get("upgrader"), "dispatcher": services.get("dispatcher")}
    return pids


def _progress(watch: TimedWatch, cpu: CpuSampler, before: dict[str, tuple[float, int]], elapsed: float,
              load: float) -> tuple[dict[str, tuple[float, int]], float]:
    """A line while the upgrade runs: its step, the load, and each process's CPU since the last
    line (which one saturates, when a size does not finish)."""
    view = next((e.data["upgrade"] for e in reversed(watch.seen) if "upgrade" in e.data), None)
    step = next((s for s in view["steps"] if s["name"] == view["step"]), None) if view else None
    now = cpu.totals()
    spent = ", ".join(f"{k} {now[k][0] - before.get(k, (0.0, 0))[0]:.0f}" for k in SHOWN if k in now)
    print(f"         [{elapsed:5.0f} s] {step['name'] + ' ' + str(step['done']) + '/' + str(step['total']) if step else '-'}; "
          f"load {load:.1f}; CPU s since the last line: {spent}", flush=True)
    return now, time.monotonic()


def drain_figures(log: Path, since: float) -> str:
    """The drain log's calls after `since` (epoch seconds), summed by kind."""
    try:
        calls = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    except OSError:
        return "none recorded"
    calls = [c for c in calls if c["at"] >= since]
    out = []
    for what in ("drain", "uncordon"):
        mine = [c for c in calls if c["what"] == what]
        if mine:
            longest = max(mine, key=lambda c: c["s"])
            out.append(f"{what} {len(mine)} batches ({sum(c['nodes'] for c in mine)} nodes) in {sum(c['s'] for c in mine):.1f} s, "
                       f"longest {longest['s']:.1f} s ({longest['nodes']} nodes from {longest['first']})")
    return "; ".join(out) or "none recorded"


async def run_real_upgrade(nodes: int, workdir: Path, to: str, etcd: str, max_unavailable: str) -> dict[str, Any]:
    """Install at the older built minor and etcd 3.5, upgrade to `to` and `etcd`; the figures."""
    drains = workdir.parent / "drains.jsonl"
    instrument_services({"BKE_BENCH_DRAIN_LOG": str(drains)})
    async with real_install(nodes, workdir, kubernetes=KUBERNETES, etcd=ETCD_35) as r:
        if r["status"] != "Succeeded":
            return {"status": f"install {r['status']}: {r['reason']}", "install": r, "nodes": nodes}
        lab: RealLab = r["lab"]
        await heartbeats(lab)
        req = UpgradeCluster(request_id=f"up-{lab.cluster}", cluster=lab.cluster, kubernetes_version=to,
                             etcd_version=etcd, max_unavailable=max_unavailable,
                             etcd_clusters=[c.name for c in lab.plan.etcd_clusters], origin="bus")
        load = [os.getloadavg()[0]]
        since, fleet0 = time.time(), time.process_time()
        async with CpuSampler(_processes(lab)) as cpu, TimedWatch(lab.nc, upgrade_subjects(lab.cluster)) as watch:
            upgrade = asyncio.create_task(follow_upgrade(watch, lab.js, req, ANSWER_TIMEOUT_S, UPGRADE_TIMEOUT_S))
            shown = ({}, time.monotonic())
            while not upgrade.done():
                await asyncio.wait([upgrade], timeout=5.0)
                load.append(os.getloadavg()[0])
                if time.monotonic() - shown[1] >= PROGRESS_EVERY_S:
                    shown = _progress(watch, cpu, shown[0], time.time() - since, load[-1])
            followed = upgrade.result()
        totals = {**cpu.totals(), "the fleet": (time.process_time() - fleet0, 1)}
        return {
            **upgrade_figures(followed), "install": r, "nodes": nodes,
            "drains": drain_figures(drains, since),
            "cpu": totals,
            "load": f"{load[0]:.1f} at the start, {max(load):.1f} at most, {load[-1]:.1f} at the end",
        }


def _cpu(totals: dict[str, tuple[float, int]], name: str) -> str:
    s, n = totals.get(name, (0.0, 0))
    return f"{s:.0f} CPU-s" + (f" ({n} processes)" if n > 1 else "")


def real_row(up: dict[str, Any], null: dict[str, Any] | None) -> dict[str, str]:
    """The figures of one size, as printed and recorded (bench/upgrade.py's `--json` record)."""
    if "total" not in up:
        return {"N": f"{up['nodes']:,}", "upgrade": "not run", "status": up["status"]}
    inst, totals = up["install"], up["cpu"]
    return {
        "N": f"{up['nodes']:,}", "upgrade": f"{up['total']:.1f} s", "status": up["status"],
        "null fleet (same N)": f"{null['total']:.1f} s" if null and "total" in null else (null or {}).get("status", "not run"),
        "apiserver": _cpu(totals, "kube-apiserver"), "etcd": _cpu(totals, "etcd"),
        "step times (s)": up["step_times"], "drains": up["drains"],
        "CPU s by process": ", ".join(f"{k} {totals[k][0]:.1f}" for k in (*SHOWN, "the fleet") if k in totals),
        "load (1 min)": up["load"], "install": f"{inst['total']:.1f} s",
        "node steps (nodes/batches)": up["steps"],
    }
