#!/usr/bin/env python3
"""Install orchestration time at scale, next to the floor of the same command deliveries.
A script, not a test.

    .venv/bin/python bench/install.py --nodes 100 1000 5000

For each N: a real NATS + Redis (embedded), the five services (planner, certs, renderer,
dispatcher, upgrader) each as its own OS process (as in the lab), and a fleet of N lightweight
agents in this process: real `AgentLoop`s (one durable consumer each, results, acks, journals
in memory) whose steps cost nothing (NullBackend). The spec: 3 masters + N-3 workers, ECDSA-P256 keys.

* ``install``: agent consumer set-up + from the cluster request to `install finished`
  (planning, the PKI, rendering, sealing per agent, every phase's commands and results).
* ``floor``: the same number of command deliveries done the minimal way in the same run:
  N durable consumers with the agents' own config, JetStream publish of each command (about
  600 bytes, all at once), the consumer acks and publishes a result, one durable pull consumer
  collects every result.
* ``same-bytes floor``: the same, replaying what the install's agents saw (bke_agent.trace): each
  phase's commands in turn, each of the size its real command had, answered with a result of the
  size its real result had; a phase's wave starts when the last one's results are in.
* ratio = install / floor, and install / same-bytes floor.
* per phase (install_trace.py): its wall time; when its first and last command reached an agent;
  how long after its last result the next phase began; its commands' and results' bytes; each
  process's CPU seconds in it (the services, NATS, and this process: the fleet); NATS' message
  and byte counters over it.

`--profile DIR`: cProfile stats of the install (from the fleet's start to `install finished`) of
the dispatcher and certs (dispatcher-N.pstats, certs-N.pstats) and of the fleet
(fleet-N.pstats); read them with `python -m pstats`. cProfile slows what it profiles (about 2x):
the times of a profiled run are not the bench's figures.

With `--control-plane real` (bench/real_cp.py): one real master and N-1 kwok nodes; it prints
the install, labels + health, the Node registrations, and the apiserver's, etcd's and kwok's CPU
seconds and peak RSS.
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import signal
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bke.adapters.bus.connect import connect_nats
import nats
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from bke.adapters.bus import EventWatch, put_blob
from bke.adapters.bus.streams import OBJECT_BUCKET
from bke.contracts import INSTALL_CLUSTER, InstallCluster
from bke.contracts.agent import agent_subject
from bke.lab.supervisor import LabSupervisor
from bke.adapters.runtime import RuntimeInfo
from bke.core.spec.synth import synth_spec_text
from bke_agent.fleet import Fleet
from bke.lab.trust import ensure_lab_command_key
from bke.adapters.provisioning import provision_agents
from bke.core.secrets.signing import parse_public_line
from bke_agent.loop import consumer_config
from bke_agent.settings import AgentSettings
from real_cp import proc_cpu_s  # bench/real_cp.py (this script's folder is on sys.path)
from upgrade_events import instrument_services  # bench/upgrade_events.py
from install_trace import PhaseClock, floor_waves, phase_rows, print_phase_rows  # bench/install_trace.py
from bke_agent.trace import PhaseTrace
from record import add_json_option, save  # bench/record.py

PROFILED = ("dispatcher", "certs")  # the services --profile profiles (with the fleet)
SMALL_COMMAND = 613  # bytes of the 600-byte floor's command: about the size of a small one
RESULT_SIZE = "Bench-Result-Size"  # a same-bytes floor's command: the size of the result to answer with
STREAM = "BKE_AGENT"
OUTPUT_STREAM = "BKE_AGENT_OUT"  # the agents' results (bke.adapters.bus.streams)


@dataclass
class InstalledLab:
    """A lab whose cluster is installed, its services and its fleet still running (bench/upgrade.py
    goes on from here)."""

    sup: LabSupervisor
    info: RuntimeInfo
    nc: NatsClient
    js: JetStreamContext
    fleet: Fleet
    cluster: str
    result: dict
    trace: PhaseTrace  # what the fleet's agents received and answered, phase by phase
    clock: PhaseClock  # the install's phase events, with CPU and NATS counters at each


@asynccontextmanager
async def installed_lab(nodes: int, workdir: Path, profile: Path | None = None) -> AsyncIterator[InstalledLab]:
    """Services as processes, N null agents in this process, the cluster installed; torn down on
    exit. With `profile`, the install (from the fleet's start to `install finished`) is profiled:
    PROFILED's services and this process (the fleet) write their cProfile stats there."""
    os.environ["BKE_DISPATCHER_HEALTH_INTERVAL_S"] = "0"
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        instrument_services({"BKE_BENCH_PROFILE_DIR": str(profile), "BKE_BENCH_PROFILE_MODE": "cprofile",
                             "BKE_BENCH_PROFILE": ",".join(f"bke-{s}" for s in PROFILED)})
    sup = LabSupervisor(workdir, auth=False)  # the fleet: thousands of agents on one connection (no one identity)
    info = sup.ensure_runtime()
    sup.ensure_services(info)
    cluster = f"bench{nodes}"
    spec = synth_spec_text(nodes, name=cluster, key_algorithm="ECDSA-P256").encode()
    hostnames = [f"n{i}" for i in range(nodes)]
    nc = await connect_nats(info.nats_url)
    js = nc.jetstream(timeout=30)
    await sup.wait_services_ready(js)
    fleet: Fleet | None = None
    try:
        base = AgentSettings(cluster=cluster, node="n0", backend="host", nats_url=info.nats_url, heartbeat_s=0)
        # trust: the fleet runs what the deployment key signs; its keys are provisioned
        command_key = parse_public_line(ensure_lab_command_key(info, sup.workdir))
        trace = PhaseTrace(time.perf_counter)
        fleet = Fleet.null(nc, js, base, hostnames, command_key=command_key, trace=trace)
        await provision_agents(nc, cluster, fleet.identities())
        procs = {"nats": info.nats_pid, **sup.pids()["services"]}
        clock = PhaseClock(cluster, lambda: {**{k: proc_cpu_s(p) for k, p in procs.items()}, "fleet": time.process_time()},
                           lambda: nats_counters(info.nats_monitor_url))
        await clock.start(nc)
        prof = cProfile.Profile() if profile is not None else None
        async with EventWatch(nc, [f"bke.v1.install.{cluster}.finished"]) as watch:
            if prof is not None:
                for name in PROFILED:
                    os.kill(sup.pids()["services"][name], signal.SIGUSR2)  # a fresh profile from here
                prof.enable()
            t0 = time.perf_counter()
            setup = await fleet.start()
            t1 = time.perf_counter()
            ref = await put_blob(js, OBJECT_BUCKET, f"specs/{cluster}.yaml", spec)
            await js.publish(INSTALL_CLUSTER, InstallCluster(request_id=cluster, spec_ref=ref).to_bytes())
            done = await watch.wait_for(lambda e: True, timeout=1800)
            t2 = time.perf_counter()
        await clock.stop()
        if prof is not None and profile is not None:
            prof.disable()
            prof.dump_stats(profile / f"fleet-{nodes}.pstats")
            await _dump_profiles(sup, profile)
            for name in PROFILED:  # one file a size, as the fleet's
                (profile / f"bke-{name}.pstats").replace(profile / f"{name}-{nodes}.pstats")
        result = {
            "status": done.data["status"],
            "setup": setup,
            "after_request": t2 - t1,
            "total": t2 - t0,
            # planning, the PKI and the first render: from the request to the first phase's start
            "before_phases": min((m.at for m in clock.marks), default=t2) - t1,
            "commands": fleet.executed,
            "replayed": fleet.replayed,
        }
        yield InstalledLab(sup, info, nc, js, fleet, cluster, result, trace, clock)
    finally:
        if fleet is not None:
            await fleet.stop(grace=1.0)
        await nc.close()
        sup.down()


async def _dump_profiles(sup: LabSupervisor, profile: Path, timeout: float = 60.0) -> None:
    """Have each profiled service write its stats (SIGUSR1) and wait until every file is there."""
    for name in PROFILED:
        (profile / f"bke-{name}.pstats").unlink(missing_ok=True)
        os.kill(sup.pids()["services"][name], signal.SIGUSR1)
    deadline = time.monotonic() + timeout
    while not all((profile / f"bke-{name}.pstats").exists() for name in PROFILED):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no profile written by {', '.join(PROFILED)} within {timeout:.0f} s")
        await asyncio.sleep(0.1)  # polling under a deadline


async def run_install(nodes: int, workdir: Path, profile: Path | None = None) -> dict:
    async with installed_lab(nodes, workdir, profile) as lab:
        order = list(dict.fromkeys(m.phase for m in lab.clock.marks))
        return {**lab.result, "phases": await _phase_times(lab.nc, lab.cluster),
                "by_phase": phase_rows(lab.clock.marks, lab.trace), "waves": floor_waves(lab.trace, order)}


async def _phase_times(nc, cluster: str) -> str:
    from datetime import datetime

    from bke_cli.status_client import get_status

    doc = await get_status(nc, cluster, "none")
    out = []
    for p in doc.phases if doc else []:
        if p.started_at and p.finished_at:
            d = datetime.fromisoformat(p.finished_at) - datetime.fromisoformat(p.started_at)
            out.append(f"{p.name} {d.total_seconds():.1f}")
    return ", ".join(out)


def nats_counters(monitor_url: str) -> dict[str, int]:
    """The NATS server's message and byte counters so far (its /varz monitoring endpoint): taken
    before and after the deliveries, they show what an upgrade's NATS does beyond the floor's."""
    with urllib.request.urlopen(f"{monitor_url.rstrip('/')}/varz", timeout=5) as r:  # noqa: S310 - the lab's own
        v = json.load(r)
    return {k: int(v.get(k, 0)) for k in ("in_msgs", "out_msgs", "in_bytes", "out_bytes")}


def counters_delta(before: dict[str, int], after: dict[str, int]) -> str:
    d = {k: after[k] - before[k] for k in before}
    return (f"in {d['in_msgs']:,} msgs / {d['in_bytes'] / 1e6:.1f} MB, "
            f"out {d['out_msgs']:,} msgs / {d['out_bytes'] / 1e6:.1f} MB")


async def run_floor(nodes: int, commands: int, workdir: Path,
                    waves: list[list[tuple[str, int, int]]] | None = None) -> dict:
    """The same deliveries, minimal: no services, no state, no steps. Without `waves`, `commands`
    commands of about 600 bytes, spread over the nodes and sent at once, each answered with its
    own bytes. With `waves` (install_trace.floor_waves: the same-bytes floor), each wave in turn,
    the next one after every result of the last: each (node, command size, result size) sent as a
    command of that size and answered with a result of that size."""
    sup = LabSupervisor(workdir, auth=False)  # the fleet: thousands of agents on one connection (no one identity)
    info = sup.ensure_runtime()
    cluster = f"floor{nodes}"
    hostnames = [f"n{i}" for i in range(nodes)]
    if waves is None:
        per_node = [commands // nodes + (1 if i < commands % nodes else 0) for i in range(nodes)]
        waves = [[(h, SMALL_COMMAND, 0) for h, k in zip(hostnames, per_node) for _ in range(k)]]
    nc = await connect_nats(info.nats_url)
    js = nc.jetstream(timeout=30)
    got = 0
    try:
        t0 = time.perf_counter()
        sem = asyncio.Semaphore(64)

        async def agent(h: str) -> None:
            cfg = consumer_config(cluster, h, 30.0)
            async with sem:
                await js.add_consumer(STREAM, cfg)

                async def cb(msg) -> None:
                    size = int((msg.headers or {}).get(RESULT_SIZE, "0"))
                    await js.publish(agent_subject(cluster, h, "result"), b" " * size if size else msg.data)
                    await msg.ack()

                await js.subscribe_bind(STREAM, cfg, cfg.durable_name, cb=cb, manual_ack=True)

        await asyncio.gather(*(agent(h) for h in hostnames))
        collector = await js.pull_subscribe(
            f"bke.v1.agent.{cluster}.*.result", durable="floor-results", stream=OUTPUT_STREAM,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL),
        )
        t1 = time.perf_counter()
        nats0, nats_cpu0 = nats_counters(info.nats_monitor_url), proc_cpu_s(info.nats_pid)

        async def collect(until: int) -> None:
            nonlocal got
            while got < until:
                try:
                    msgs = await collector.fetch(256, timeout=1.0)
                except nats.errors.TimeoutError:
                    continue
                for m in msgs:
                    await m.ack()
                got += len(msgs)

        sent = 0
        for wave in waves:
            sent += len(wave)
            task = asyncio.create_task(collect(sent))
            pubs = []
            for j, (h, size, result_size) in enumerate(wave):
                body = b" " * size  # the floor's consumers never read it: only its size counts
                headers = {"Nats-Msg-Id": f"{sent}/{j}", **({RESULT_SIZE: str(result_size)} if result_size else {})}
                pubs.append(js.publish(agent_subject(cluster, h, "command"), body, headers=headers))
                if len(pubs) >= 256:
                    await asyncio.gather(*pubs)
                    pubs = []
            await asyncio.gather(*pubs)
            await task
        t2 = time.perf_counter()
        return {"setup": t1 - t0, "deliveries": t2 - t1, "total": t2 - t0, "nats_cpu_s": proc_cpu_s(info.nats_pid) - nats_cpu0,
                "nats": counters_delta(nats0, nats_counters(info.nats_monitor_url))}
    finally:
        await nc.close()
        sup.down()


async def main_real(sizes: list[int], json_path: Path | None = None) -> int:
    """`--control-plane real`: the install against one real control plane and kwok nodes
    (bench/real_cp.py); the figure to watch is labels + health."""
    from real_cp import real_install, row, summary

    ok = True
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"bke-bench-real-{n}-") as d:
            async with real_install(n, Path(d)) as r:
                print(summary(r), flush=True)
                rows.append(row(r))
                ok = ok and r["status"] == "Succeeded"
        os.sync()
    save(json_path, "install-real", rows)
    return 0 if ok else 1


async def main(sizes: list[int], json_path: Path | None = None, profile: Path | None = None) -> int:
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix=f"bke-bench-{n}-") as d:
            inst = await run_install(n, Path(d) / "install", profile)
            # The install leaves many dirty pages (JetStream's file store, thousands of consumers):
            # written back while the floor runs, they slowed it 2-5x and flattered the ratio.
            os.sync()
            floor = await run_floor(n, inst["commands"], Path(d) / "floor")
            os.sync()
            same = await run_floor(n, inst["commands"], Path(d) / "floor-same", waves=inst["waves"])
        os.sync()  # likewise for the next size: each starts on a settled disk
        rows.append((n, inst, floor, same))
        print(
            f"N={n:>5}  install {inst['total']:7.1f} s ({inst['status']}; agent set-up {inst['setup']:5.1f} s, "
            f"request->finished {inst['after_request']:6.1f} s; {inst['commands']} commands, {inst['replayed']} replayed)  "
            f"floor {floor['total']:6.1f} s (set-up {floor['setup']:5.1f} s)  ratio {inst['total'] / floor['total']:4.1f}x  "
            f"same-bytes floor {same['total']:6.1f} s  ratio {inst['total'] / same['total']:4.1f}x",
            flush=True,
        )
        print(f"         phases (s): {inst['phases']}; request -> first phase {inst['before_phases']:.1f} s", flush=True)
        print(f"         NATS: floor {floor['nats']}; same-bytes floor {same['nats']}", flush=True)
        print_phase_rows(inst["by_phase"])
    save(json_path, "install", [{
        "N": f"{n:,}", "install": f"{inst['total']:.1f} s", "status": inst["status"], "agent set-up": f"{inst['setup']:.1f} s",
        "request->finished": f"{inst['after_request']:.1f} s", "commands": str(inst["commands"]),
        "replayed": str(inst["replayed"]), "floor": f"{floor['total']:.1f} s", "floor set-up": f"{floor['setup']:.1f} s",
        "ratio": f"{inst['total'] / floor['total']:.1f}x", "same-bytes floor": f"{same['total']:.1f} s",
        "same-bytes ratio": f"{inst['total'] / same['total']:.1f}x", "phases (s)": inst["phases"],
        "request -> first phase": f"{inst['before_phases']:.1f} s",
        "by phase": "; ".join(f"{r['phase']}: " + ", ".join(f"{k} {v}" for k, v in r.items() if k != "phase")
                              for r in inst["by_phase"])} for n, inst, floor, same in rows])
    return 0 if all(r[1]["status"] == "Succeeded" for r in rows) else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--control-plane", choices=("simulated", "real"), default="simulated",
                    help="real: one real control plane and kwok nodes (python3 dev.py kube first)")
    ap.add_argument("--profile", type=Path, default=None,
                    help="write cProfile stats of the install to DIR: dispatcher-N.pstats, certs-N.pstats (the services, "
                         "started as fresh interpreters under bench/profiling/sitecustomize.py) and fleet-N.pstats")
    add_json_option(ap)
    args = ap.parse_args()
    sys.exit(asyncio.run(main_real(args.nodes, args.json) if args.control_plane == "real"
                         else main(args.nodes, args.json, args.profile)))
