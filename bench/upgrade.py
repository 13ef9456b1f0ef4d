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
heartbeats, so each agent sends one before the request (bench/upgrade_events.py).

With `--control-plane real` (bench/real_upgrade.py): one real master at the older built minor and
N-1 kwok nodes, upgraded to the newer one; it prints the upgrade, its steps and drains, the
apiserver's and etcd's CPU seconds, and this script's null-fleet figure for the same N.
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

from install import counters_delta, installed_lab, nats_counters, proc_cpu_s, run_floor  # noqa: E402  (bench/install.py)
from real_cp import ETCD, NEWER  # noqa: E402  (bench/real_cp.py)
from real_upgrade import real_row, run_real_upgrade  # noqa: E402  (bench/real_upgrade.py)
from record import add_json_option, save  # noqa: E402  (bench/record.py)
from upgrade_events import (TimedWatch, follow_upgrade, heartbeats, instrument_services, upgrade_figures,  # noqa: E402
                            upgrade_subjects)

from bke.contracts.upgrade import UpgradeCluster  # noqa: E402

ANSWER_TIMEOUT_S = 600.0  # the request's checks render nothing; a 5,000-node plan loads in seconds
UPGRADE_TIMEOUT_S = 1800.0
NULL_TO, NULL_ETCD = "1.34.1", "3.5.2"  # from the install's 1.33.2 and 3.5.1 (bench/install.py)


def _proc_status(pid: int) -> dict[str, str]:
    try:
        return dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    except OSError:
        return {}


def _peak_rss_mb(pid: int) -> float:
    return float(_proc_status(pid).get("VmHWM", "0 kB").split()[0]) / 1024


_cpu_s = proc_cpu_s


def _render_line(log: Path) -> str:
    """The upgrader's own account of its render process (bke_upgrader.renders), if it logged one."""
    try:
        lines = [ln for ln in log.read_text().splitlines() if "renders done in a child process" in ln]
    except OSError:
        return "-"
    if not lines:
        return "-"
    return str(json.loads(lines[-1]).get("msg", "-")).removeprefix("both renders done in a child process: ")


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
    instrument_services({"BKE_BENCH_PROFILE_DIR": str(out), "BKE_BENCH_PROFILE": ",".join(f"bke-{s}" for s in services),
                         "BKE_BENCH_PROFILE_MODE": "gc" if gc_only else "cprofile"})


async def run_upgrade(nodes: int, workdir: Path, to: str, etcd: str, max_unavailable: str,
                      profile: Path | None = None, gc_only: bool = False,
                      profiled: tuple[str, ...] = ("upgrader",)) -> dict:
    _profile_services(profile, gc_only, profiled)
    async with installed_lab(nodes, workdir) as lab:
        if lab.result["status"] != "Succeeded":
            return {"status": f"install {lab.result['status']}", "install": lab.result}
        await heartbeats(lab)
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
        prof = cProfile.Profile() if profile is not None else None
        gc_timer: _GcTimer | None = None
        async with TimedWatch(lab.nc, upgrade_subjects(lab.cluster)) as watch:
            if prof is not None:
                for name in profiled:
                    os.kill(lab.sup.pids()["services"][name], signal.SIGUSR2)
                gc_timer = _GcTimer()
                if not gc_only:
                    prof.enable()
            followed = await follow_upgrade(watch, lab.js, req, ANSWER_TIMEOUT_S, UPGRADE_TIMEOUT_S)
            if prof is not None and profile is not None:
                prof.disable()
                if not gc_only:
                    prof.dump_stats(profile / f"fleet-{nodes}.pstats")
                if gc_timer is not None:
                    gc_timer.stop(profile / f"fleet-{nodes}.gc")
                for name in profiled:
                    os.kill(lab.sup.pids()["services"][name], signal.SIGUSR1)
        up = upgrade_figures(followed)
        if followed.end is None:
            return {**up, "install": lab.result}
        return {
            **up,
            "install": lab.result,
            "executed": lab.fleet.executed - before[0],
            "replayed": lab.fleet.replayed - before[1],
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


async def main_real(sizes: list[int], to: str | None, etcd: str | None, max_unavailable: str,
                    json_path: Path | None = None) -> int:
    """`--control-plane real` (bench/real_upgrade.py): the upgrade on one real control plane and
    kwok nodes, then this script's own null-fleet upgrade at the same size."""
    ok = True
    rows: list[dict[str, str]] = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"bke-bench-upgrade-real-{n}-") as d:
            up = await run_real_upgrade(n, Path(d) / "lab", to or NEWER, etcd or ETCD, max_unavailable)
        os.sync()
        null = None
        if up["status"] == "Succeeded":
            with tempfile.TemporaryDirectory(prefix=f"bke-bench-upgrade-{n}-") as d:
                try:
                    null = await run_upgrade(n, Path(d) / "lab", NULL_TO, NULL_ETCD, max_unavailable)
                finally:
                    gc.unfreeze()  # frozen by run_upgrade
            os.sync()
        row = real_row(up, null)
        print(f"N={row.pop('N'):>6}  real control plane: " + "; ".join(f"{k} {row.pop(k)}" for k in
              ("upgrade", "status", "null fleet (same N)", "apiserver", "etcd") if k in row), flush=True)
        for k, v in row.items():
            print(f"         {k}: {v}", flush=True)
        rows.append(real_row(up, null))
        ok = ok and up["status"] == "Succeeded"
    save(json_path, "upgrade-real", rows)
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--control-plane", choices=("simulated", "real"), default="simulated",
                    help="real: one real control plane and kwok nodes (bench/real_upgrade.py; python3 dev.py kube first)")
    ap.add_argument("--to", default=None, help=f"the target Kubernetes version ({NULL_TO}; real: {NEWER})")
    ap.add_argument("--etcd-version", default=None, help=f"the target etcd ({NULL_ETCD}; real: {ETCD})")
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
    if a.control_plane == "real":
        sys.exit(asyncio.run(main_real(a.nodes, a.to, a.etcd_version, a.max_unavailable, a.json)))
    sys.exit(asyncio.run(main(a.nodes, a.to or NULL_TO, a.etcd_version or NULL_ETCD, a.max_unavailable, a.profile,
                              a.gc_only, tuple(a.profile_services.split(",")), a.json)))
