#!/usr/bin/env python3
"""The fleet install under faults: some agents fail, some are slow. A script, not a test.

    .venv/bin/python bench/faults.py --nodes 5000 --failing 0.01 --slow 0.01 --slow-s 2

A real NATS + Redis (embedded), the five services as their own OS processes (as in the lab), and
N in-process agents (real `AgentLoop`s, as in bench/install.py) of three kinds:

* healthy: every step succeeds at once (NullBackend);
* failing (`--failing`, a fraction): every step fails until the bench "repairs" the node;
* slow (`--slow`, a fraction): every command takes `--slow-s` longer.

What it does and prints:
1. the install, from request to `install.finished` (it fails: the failing nodes are named);
2. the nodes are repaired and `bke retry` is sent for the failed ones; the time to Succeeded;
3. messages per second through NATS over the whole run (the server's own in/out counters),
   peak RSS (VmHWM) of every service, NATS, Redis and this process (which holds the fleet).
Target: every service under 300 MB at 5,000 nodes.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

from record import add_json_option, save  # bench/record.py (this script's folder is on sys.path)

from bke.adapters.bus import EventWatch, put_blob
from bke.adapters.bus.connect import connect_nats
from bke.adapters.bus.streams import OBJECT_BUCKET
from bke.contracts import INSTALL_CLUSTER, InstallCluster
from bke.contracts.agent_steps import Step
from bke.contracts.install import RETRY_INSTALL, RetryInstall
from bke.lab.supervisor import LabSupervisor
from bke.core.spec.synth import synth_spec_text
from bke_agent.backends.base import Content, StepOutcome
from bke_agent.backends.null import NullBackend
from bke_agent.errors import StepError
from bke_agent.fleet import Fleet
from bke_agent.identity import AgentIdentity
from bke_agent.journal import MemoryJournal
from bke_agent.loop import AgentLoop
from bke_agent.settings import AgentSettings
from bke_agent.verify import CommandVerifier
from bke.lab.trust import ensure_lab_command_key
from bke.adapters.provisioning import provision_agents
from bke.core.secrets.signing import parse_public_line


class FaultyBackend(NullBackend):
    """Fails every step while `broken`; sleeps `delay` before each step of a slow node."""

    def __init__(self, *, broken: bool = False, delay: float = 0.0) -> None:
        super().__init__()
        self.broken, self.delay = broken, delay
        self._first_step = True

    async def execute(self, step: Step, content: Content) -> StepOutcome:
        if self.broken:
            raise StepError(f"bench: node broken at step {step.id}", exit_code=1)
        if self.delay and self._first_step:
            await asyncio.sleep(self.delay)  # the injected slowness itself, once per command
        self._first_step = False
        return await super().execute(step, content)


def _peak_rss_mb(pid: int) -> tuple[float, float] | None:
    """(peak, current) resident set of a live process in MB, from /proc."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    except OSError:
        return None
    kb = lambda k: float(fields.get(k, "0 kB").split()[0])  # noqa: E731
    return kb("VmHWM") / 1024, kb("VmRSS") / 1024


def _varz(monitor_url: str) -> tuple[int, int]:
    doc = httpx.get(f"{monitor_url}/varz", timeout=5.0).json()
    return int(doc["in_msgs"]), int(doc["out_msgs"])


async def run(nodes: int, failing: float, slow: float, slow_s: float, workdir: Path, seed: int,
              rows: list[dict[str, str]] | None = None) -> int:
    """The run; each printed figure is also added to `rows` (figure, value)."""
    rows = [] if rows is None else rows
    os.environ["BKE_DISPATCHER_HEALTH_INTERVAL_S"] = "0"
    sup = LabSupervisor(workdir, auth=False)  # the fleet: thousands of agents on one connection (no one identity)
    info = sup.ensure_runtime()
    sup.ensure_services(info)
    cluster = f"faults{nodes}"
    spec = synth_spec_text(nodes, name=cluster, key_algorithm="ECDSA-P256").encode()
    hostnames = [f"n{i}" for i in range(nodes)]
    rng = random.Random(seed)
    workers = hostnames[3:]  # the first three are the masters of the synthetic spec
    broken = set(rng.sample(workers, max(1, round(nodes * failing)) if failing else 0))
    slowed = set(rng.sample(sorted(set(workers) - broken), max(1, round(nodes * slow)) if slow else 0))
    nc = await connect_nats(info.nats_url)
    js = nc.jetstream(timeout=30)
    await sup.wait_services_ready(js)
    backends: dict[str, FaultyBackend] = {}
    try:
        base = AgentSettings(cluster=cluster, node="n0", backend="host", nats_url=info.nats_url, heartbeat_s=0)
        # trust: the fleet runs what the deployment key signs; its keys are provisioned
        command_key = parse_public_line(ensure_lab_command_key(info, sup.workdir))
        fleet = Fleet(nc, js)
        for h in hostnames:
            backends[h] = FaultyBackend(broken=h in broken, delay=slow_s if h in slowed else 0.0)
            fleet.add(AgentLoop(nc, js, base.model_copy(update={"node": h}), backends[h], MemoryJournal(),
                                AgentIdentity.ephemeral(), verifier=CommandVerifier(command_key, cluster, h)))
        await provision_agents(nc, cluster, fleet.identities())
        in0, out0 = _varz(info.nats_monitor_url)
        finished = f"bke.v1.install.{cluster}.finished"
        async with EventWatch(nc, [finished]) as watch:
            setup = await fleet.start()
            t0 = time.perf_counter()
            ref = await put_blob(js, OBJECT_BUCKET, f"specs/{cluster}.yaml", spec)
            await js.publish(INSTALL_CLUSTER, InstallCluster(request_id=cluster, spec_ref=ref).to_bytes())
            first = await watch.wait_for(lambda e: True, timeout=1800)
            t1 = time.perf_counter()
            print(f"N={nodes}: {len(broken)} failing, {len(slowed)} slow (+{slow_s:.1f} s a command); "
                  f"agent set-up {setup:.1f} s", flush=True)
            rows.append({"figure": "fleet", "value": f"N={nodes}: {len(broken)} failing, {len(slowed)} slow "
                         f"(+{slow_s:.1f} s a command); agent set-up {setup:.1f} s"})
            print(f"  install: {first.data['status']} after {t1 - t0:.1f} s; phase {first.data.get('phase')}; "
                  f"reason: {str(first.data.get('message'))[:300]}", flush=True)
            rows.append({"figure": "install", "value": f"{first.data['status']} after {t1 - t0:.1f} s; "
                         f"phase {first.data.get('phase')}"})
            reason = str(first.data.get("message"))
            named = {h for h in broken if f"{h}," in reason or f"{h};" in reason or f"{h} " in reason}
            print(f"  failing nodes named in the reason: {len(named)} (the reason lists ten at most; "
                  f"{len(broken)} failing)", flush=True)
            rows.append({"figure": "failing nodes named in the reason", "value": f"{len(named)} (of {len(broken)} failing)"})
            status = first.data["status"]
            if status == "Failed":
                for h in broken:
                    backends[h].broken = False  # repaired by the operator
                await js.publish(RETRY_INSTALL, RetryInstall(request_id=f"{cluster}-retry", cluster=cluster).to_bytes())
                second = await watch.wait_for(lambda e: e is not first,
                                              timeout=1800)
                t2 = time.perf_counter()
                status = second.data["status"]
                print(f"  after repair + retry: {status} {t2 - t1:.1f} s later; total {t2 - t0:.1f} s", flush=True)
                rows.append({"figure": "after repair + retry", "value": f"{status} {t2 - t1:.1f} s later; total {t2 - t0:.1f} s"})
            else:
                t2 = t1
        in1, out1 = _varz(info.nats_monitor_url)
        secs = max(t2 - t0, 1e-9)
        print(f"  NATS: {(in1 - in0) / secs:,.0f} msgs/s in, {(out1 - out0) / secs:,.0f} msgs/s out "
              f"({in1 - in0:,} in, {out1 - out0:,} out); commands run {fleet.executed}, replayed {fleet.replayed}",
              flush=True)
        rows.append({"figure": "NATS", "value": f"{(in1 - in0) / secs:,.0f} msgs/s in, {(out1 - out0) / secs:,.0f} msgs/s out "
                     f"({in1 - in0:,} in, {out1 - out0:,} out)"})
        rows.append({"figure": "commands", "value": f"run {fleet.executed}, replayed {fleet.replayed}"})
        pids = {f"bke-{name}": pid for name, pid in sup.pids()["services"].items()}
        rt = sup.runtime.read_info(sup.runtime.workdir)
        if rt is not None:
            pids.update({"nats-server": rt.nats_pid, "redis-server": rt.redis_pid})
        pids["bench (fleet)"] = os.getpid()
        for name, pid in pids.items():
            mem = _peak_rss_mb(pid)
            if mem is not None:
                print(f"  {name:<16} peak RSS {mem[0]:7.1f} MB (now {mem[1]:7.1f} MB)", flush=True)
                rows.append({"figure": f"{name} peak RSS", "value": f"{mem[0]:.1f} MB (now {mem[1]:.1f} MB)"})
        await fleet.stop(grace=1.0)
        return 0 if status == "Succeeded" else 1
    finally:
        await nc.close()
        sup.down()


def main() -> int:
    import logging

    logging.basicConfig(level=logging.ERROR)  # the fleet's per-step warnings would drown the figures
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--failing", type=float, default=0.01)
    ap.add_argument("--slow", type=float, default=0.01)
    ap.add_argument("--slow-s", type=float, default=2.0)
    ap.add_argument("--seed", type=int, default=7)
    add_json_option(ap)
    args = ap.parse_args()
    rows: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bke-bench-faults-") as d:
        code = asyncio.run(run(args.nodes, args.failing, args.slow, args.slow_s, Path(d), args.seed, rows))
    save(args.json, "faults", rows)
    return code


if __name__ == "__main__":
    sys.exit(main())
