#!/usr/bin/env python3
"""Upgrade orchestration time at scale, next to the floor of the same command deliveries.
A script, not a test.

    .venv/bin/python bench/upgrade.py --nodes 100 1000 5000

For each N: the install benchmark's lab (bench/install.py `installed_lab`: real NATS + Redis,
every service as its own OS process, N NullBackend agents in this process; 3 masters + N-3
workers, ECDSA-P256), the cluster installed, then upgraded 1.33.2 -> 1.34.1 with etcd 3.5.1 ->
3.5.2 and `--max-unavailable 10%` (`--to`, `--etcd-version`, `--max-unavailable` change them).

* ``upgrade``: from publishing the `UpgradeCluster` request to the `Succeeded` UpgradeChanged
  (the request's checks, both renders, every step's batches: signing, publishing, results folded,
  the lab's drains recorded, addons, post-checks).
* ``floor``: bench/install.py's floor for the same number of command deliveries (JetStream
  publish of each command, the agents' own consumer config, ack and result, one collector): the
  raw delivery cost, with none of the upgrade's order (its batches wait for each other).
* ``commands``: node commands the order expands to (one per node per node step it is in),
  counted from the accepted request's steps, and checked against what the fleet executed.
* ``rss``: the upgrader process's peak resident set (VmHWM), which includes its idle time
  during the install, and its render process's (the upgrader's log line); ``CPU``: the
  upgrader's and this process's (the fleet's) CPU seconds during the upgrade, and below them
  every lab process's (NATS, Redis, each service): on a shared machine the upgrade's wall time
  follows the CPU of all of them, the floor's that of this process and NATS only.

Target: at 5,000 nodes, under 120 s and within 3x of the floor.

What the fleet does per command is the agent's own code (parse, signature check, freshness,
journal, NullBackend steps, result publish, confirmed ack); the floor (bench/install.py) does a
publish, an echoed result and a plain ack per delivery, no parse and no signature check. Before
the clock starts, the objects the install left in this process are frozen (gc.freeze, see
run_upgrade): the collector's full passes over 5,000 agents' objects are the cost of packing the
fleet into one process, not of a delivery.

The AgentsAlive check reads the dispatcher's heartbeat record: the fleet runs without periodic
heartbeats (5,000 timers), so each agent sends one after the install, as a live agent would
have, and the upgrade is asked for once the dispatcher has recorded them all.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from install import InstalledLab, counters_delta, installed_lab, nats_counters, proc_cpu_s, run_floor  # noqa: E402  (bench/install.py)
from record import add_json_option, save  # noqa: E402  (bench/record.py)

from bke.adapters.bus import EventWatch  # noqa: E402
from bke.contracts.agent import AgentHeartbeat, agent_subject  # noqa: E402
from bke.contracts.upgrade import (  # noqa: E402
    UPGRADE_ACCEPTED,
    UPGRADE_CLUSTER,
    UPGRADE_REJECTED,
    UpgradeCluster,
    upgrade_subject,
)
from bke.adapters.state.client import redis_client  # noqa: E402
from bke.adapters.state.keys.dispatcher import heartbeat_key  # noqa: E402
from bke.core.upgrade.run import LOCAL_STEPS  # noqa: E402

ANSWER_TIMEOUT_S = 600.0  # the request's checks render nothing; a 5,000-node plan loads in seconds
UPGRADE_TIMEOUT_S = 1800.0


def _proc_status(pid: int) -> dict[str, str]:
    try:
        return dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    except OSError:
        return {}


def _peak_rss_mb(pid: int) -> float:
    return float(_proc_status(pid).get("VmHWM", "0 kB").split()[0]) / 1024


_cpu_s = proc_cpu_s


async def _heartbeats(lab: InstalledLab, timeout: float = 120.0) -> None:
    """One heartbeat per agent, then poll (with a deadline) until the dispatcher recorded all."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    for node, loop in lab.fleet.loops.items():
        hb = AgentHeartbeat(cluster=lab.cluster, node=node, agent_id=loop.identity.agent_id, at=now)
        await lab.nc.publish(agent_subject(lab.cluster, node, "heartbeat"), hb.to_bytes())
    await lab.nc.flush()
    redis = redis_client(lab.info.redis_url)  # the lab's admin user
    try:
        deadline = time.monotonic() + timeout
        while await redis.hlen(heartbeat_key(lab.cluster)) < len(lab.fleet.loops):
            if time.monotonic() > deadline:
                raise TimeoutError("the dispatcher did not record every heartbeat")
            await asyncio.sleep(0.05)  # polling under a deadline
    finally:
        await redis.aclose()


class _TimedWatch(EventWatch):
    """An EventWatch that also notes when each event arrived (perf_counter)."""

    def __init__(self, nc, subjects: list[str]):  # type: ignore[no-untyped-def]
        super().__init__(nc, subjects)
        self.times: list[float] = []

    async def _on_msg(self, msg) -> None:  # type: ignore[no-untyped-def]
        self.times.append(time.perf_counter())
        await super()._on_msg(msg)


def _render_line(log: Path) -> str:
    """The upgrader's own account of its render process (bke_upgrader.renders), if it logged one."""
    try:
        lines = [ln for ln in log.read_text().splitlines() if "renders done in a child process" in ln]
    except OSError:
        return "-"
    if not lines:
        return "-"
    return str(json.loads(lines[-1]).get("msg", "-")).removeprefix("both renders done in a child process: ")


def _step_times(arrived: list, subject: str) -> str:  # type: ignore[type-arg]
    """Seconds each step took, from the first event that shows it started (or the previous
    step's end) to the first that shows it Succeeded, per UpgradeChanged arrival times."""
    ends: dict[str, float] = {}
    for at, e in arrived:
        if e.subject != subject:
            continue
        for st in e.data["upgrade"]["steps"]:
            key = st["name"] + ("/" + st["group"] if st["group"] else "")
            if st["status"] == "Succeeded" and key not in ends:
                ends[key] = at
    out, last = [], 0.0
    for key, at in sorted(ends.items(), key=lambda kv: kv[1]):
        out.append(f"{key} {at - last:.1f}")
        last = at
    return ", ".join(out)


class _GcTimer:
    """With --profile: the CPU seconds this process's garbage collector took, by generation."""

    def __init__(self) -> None:
        self.by_gen: dict[int, tuple[int, float]] = {}
        self.t0 = 0.0
        self.cpu0 = time.process_time()
        gc.callbacks.append(self._cb)

    def _cb(self, phase: str, info: dict) -> None:  # type: ignore[type-arg]
        if phase == "start":
            self.t0 = time.process_time()
        else:
            n, s = self.by_gen.get(info["generation"], (0, 0.0))
            self.by_gen[info["generation"]] = (n + 1, s + time.process_time() - self.t0)

    def stop(self, out: Path) -> None:
        gc.callbacks.remove(self._cb)
        gens = ", ".join(f"gen{g}: {n} in {s:.2f} s" for g, (n, s) in sorted(self.by_gen.items()))
        total = sum(s for _, s in self.by_gen.values())
        out.write_text(f"GC CPU {total:.2f} s of {time.process_time() - self.cpu0:.2f} s CPU ({gens}); "
                       f"objects tracked now {len(gc.get_objects())}\n")


def _profile_services(out: Path | None, gc_only: bool, services: tuple[str, ...]) -> None:
    """With --profile: these services (the upgrader by default) are started under
    bench/profiling/sitecustomize.py."""
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).resolve().parent / "profiling")
    os.environ["PYTHONPATH"] = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    os.environ["BKE_BENCH_PROFILE_DIR"] = str(out)
    os.environ["BKE_BENCH_PROFILE"] = ",".join(f"bke-{s}" for s in services)
    os.environ["BKE_BENCH_PROFILE_MODE"] = "gc" if gc_only else "cprofile"


async def run_upgrade(nodes: int, workdir: Path, to: str, etcd: str, max_unavailable: str,
                      profile: Path | None = None, gc_only: bool = False,
                      profiled: tuple[str, ...] = ("upgrader",)) -> dict:
    _profile_services(profile, gc_only, profiled)
    async with installed_lab(nodes, workdir) as lab:
        if lab.result["status"] != "Succeeded":
            return {"status": f"install {lab.result['status']}", "install": lab.result}
        await _heartbeats(lab)
        # The fleet is 5,000 agents in one process: ~900,000 objects (loops, subscriptions,
        # journals) that a real agent, a process of its own, never has. Python's full collections
        # walk them all: 5 of them took 5.6 of the fleet's 26 CPU seconds (--profile --gc-only).
        # Frozen here (after the install, before the clock starts), the collector skips what the
        # install left; each command's parsing, signature check, journal, result and ack cost
        # what they did. Unfrozen once the lab is down (main), before the floor's lab exists.
        gc.collect()
        gc.freeze()
        upgrader = lab.sup.pids()["services"]["upgrader"]
        procs = {"nats": lab.info.nats_pid, "redis": lab.info.redis_pid, **lab.sup.pids()["services"]}
        before = (lab.fleet.executed, lab.fleet.replayed)
        cpu0, fleet0 = _cpu_s(upgrader), time.process_time()
        procs0 = {name: _cpu_s(pid) for name, pid in procs.items()}
        nats0 = nats_counters(lab.info.nats_monitor_url)
        req = UpgradeCluster(request_id=f"up-{lab.cluster}", cluster=lab.cluster, kubernetes_version=to,
                             etcd_version=etcd, max_unavailable=max_unavailable, origin="bus")
        subjects = [UPGRADE_ACCEPTED, UPGRADE_REJECTED, upgrade_subject(lab.cluster)]
        prof = cProfile.Profile() if profile is not None else None
        gc_timer: _GcTimer | None = None
        async with _TimedWatch(lab.nc, subjects) as watch:
            watch_times = watch.times
            if prof is not None:
                for name in profiled:
                    os.kill(lab.sup.pids()["services"][name], signal.SIGUSR2)
                gc_timer = _GcTimer()
                if not gc_only:
                    prof.enable()
            t0 = time.perf_counter()
            await lab.js.publish(UPGRADE_CLUSTER, req.to_bytes())
            answer = await watch.wait_for(lambda e: e.subject != subjects[2] and e.data.get("requestId") == req.request_id,
                                          timeout=ANSWER_TIMEOUT_S)
            t1 = time.perf_counter()
            if answer.subject == UPGRADE_REJECTED:
                return {"status": f"rejected: {answer.data.get('message')}", "install": lab.result}
            end = await watch.wait_for(
                lambda e: e.subject == subjects[2] and e.data["upgrade"]["status"] != "Running", timeout=UPGRADE_TIMEOUT_S)
            t2 = time.perf_counter()
            if prof is not None and profile is not None:
                prof.disable()
                if not gc_only:
                    prof.dump_stats(profile / f"fleet-{nodes}.pstats")
                if gc_timer is not None:
                    gc_timer.stop(profile / f"fleet-{nodes}.gc")
                for name in profiled:
                    os.kill(lab.sup.pids()["services"][name], signal.SIGUSR1)
        view = end.data["upgrade"]
        arrived = [(at - t0, e) for at, e in zip(watch_times, watch.seen)]
        steps = answer.data["steps"]
        commands = sum(s["total"] for s in steps if s["name"] not in LOCAL_STEPS)
        return {
            "status": view["status"] if view["status"] == "Succeeded" else f"{view['status']}: {view['message']}",
            "install": lab.result,
            "accepted": t1 - t0,
            "total": t2 - t0,
            "commands": commands,
            "executed": lab.fleet.executed - before[0],
            "replayed": lab.fleet.replayed - before[1],
            "batches": sum(s["batches"] for s in steps),
            "steps": ", ".join(f"{s['name']}{'/' + s['group'] if s['group'] else ''} {s['total']}/{s['batches']}"
                               for s in steps if s["name"] not in LOCAL_STEPS),
            "step_times": _step_times(arrived, subjects[2]),
            "rss_mb": _peak_rss_mb(upgrader),
            "cpu_s": _cpu_s(upgrader) - cpu0,
            "fleet_cpu_s": time.process_time() - fleet0,
            "nats": counters_delta(nats0, nats_counters(lab.info.nats_monitor_url)),
            "cpu_by_process": ", ".join(f"{name} {_cpu_s(pid) - procs0[name]:.1f}" for name, pid in procs.items()),
            "render": _render_line(lab.sup.workdir / "logs" / "upgrader.log"),
        }


async def main(sizes: list[int], to: str, etcd: str, max_unavailable: str, profile: Path | None = None,
               gc_only: bool = False, profiled: tuple[str, ...] = ("upgrader",), json_path: Path | None = None) -> int:
    ok = True
    rows: list[dict[str, str]] = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"bke-bench-upgrade-{n}-") as d:
            try:
                up = await run_upgrade(n, Path(d) / "lab", to, etcd, max_unavailable, profile, gc_only, profiled)
            finally:
                gc.unfreeze()  # frozen by run_upgrade; the floor starts with an ordinary heap
            if up["status"] != "Succeeded":
                print(f"N={n:>5}  upgrade {up['status']}", flush=True)
                rows.append({"N": f"{n:,}", "upgrade": up["status"]})
                ok = False
                continue
            os.sync()  # the lab's JetStream pages written back before the floor (see bench/install.py)
            floor = await run_floor(n, up["commands"], Path(d) / "floor")
        os.sync()
        inst = up["install"]
        print(
            f"N={n:>5}  upgrade {up['total']:7.1f} s (accepted after {up['accepted']:5.1f} s; {up['commands']} commands, "
            f"{up['executed']} executed, {up['replayed']} replayed, {up['batches']} batches)  "
            f"floor {floor['deliveries']:6.1f} s  ratio {up['total'] / floor['deliveries']:4.1f}x  "
            f"upgrader peak RSS {up['rss_mb']:5.0f} MB, CPU {up['cpu_s']:5.1f} s (the fleet's {up['fleet_cpu_s']:5.1f} s)  "
            f"(install {inst['total']:5.1f} s)",
            flush=True,
        )
        print(f"         node steps (nodes/batches): {up['steps']}", flush=True)
        print(f"         step times (s, by UpgradeChanged arrival): {up['step_times']}", flush=True)
        print(f"         CPU s by process during the upgrade: {up['cpu_by_process']}, the fleet {up['fleet_cpu_s']:.1f}; "
              f"renders (child process): {up['render']}", flush=True)
        print(f"         NATS during the upgrade: {up['nats']}; during the floor's deliveries: {floor['nats']}, "
              f"its CPU {floor['nats_cpu_s']:.1f} s", flush=True)
        rows.append({
            "N": f"{n:,}", "upgrade": f"{up['total']:.1f} s", "accepted after": f"{up['accepted']:.1f} s",
            "commands": str(up["commands"]), "executed": str(up["executed"]), "replayed": str(up["replayed"]),
            "batches": str(up["batches"]), "floor": f"{floor['deliveries']:.1f} s",
            "ratio": f"{up['total'] / floor['deliveries']:.1f}x", "upgrader peak RSS": f"{up['rss_mb']:.0f} MB",
            "upgrader CPU": f"{up['cpu_s']:.1f} s", "the fleet's CPU": f"{up['fleet_cpu_s']:.1f} s",
            "install": f"{inst['total']:.1f} s", "node steps (nodes/batches)": up["steps"],
            "step times (s)": up["step_times"], "CPU s by process": up["cpu_by_process"], "renders": up["render"],
            "NATS during the upgrade": up["nats"], "NATS during the floor": floor["nats"],
            "floor's NATS CPU": f"{floor['nats_cpu_s']:.1f} s"})
        ok = ok and up["executed"] == up["commands"]
    save(json_path, "upgrade", rows)
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--to", default="1.34.1", help="the target Kubernetes version")
    ap.add_argument("--etcd-version", default="3.5.2")
    ap.add_argument("--max-unavailable", default="10%")
    ap.add_argument("--profile", type=Path, default=None,
                    help="write cProfile stats of the upgrade to DIR: this process (the fleet) and the "
                         "services named by --profile-services (bench/profiling/sitecustomize.py); profiling "
                         "slows them")
    ap.add_argument("--gc-only", action="store_true",
                    help="with --profile: only the garbage collector's CPU seconds, no cProfile")
    ap.add_argument("--profile-services", default="upgrader",
                    help="with --profile: the lab services to profile, comma-separated (upgrader, dispatcher, "
                         "certs, planner, renderer)")
    add_json_option(ap)
    a = ap.parse_args()
    sys.exit(asyncio.run(main(a.nodes, a.to, a.etcd_version, a.max_unavailable, a.profile, a.gc_only,
                              tuple(a.profile_services.split(",")), a.json)))
