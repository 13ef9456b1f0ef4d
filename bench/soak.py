#!/usr/bin/env python3
"""Soak: many consecutive lab installs against the same long-lived services. A script, not a test.

    .venv/bin/python bench/soak.py --rounds 20

One lab work directory; NATS, Redis and the five services start once and live through every
round, as in a deployment. Round i installs the seed example (3 masters with real etcd, 1 worker)
as cluster `soak<i>` on its own loopback addresses (127.0.<100+i>.x) with real agents, then tears
it down (its agents stop, and their etcd and other pods with them). After each round it prints
every service's resident memory and open files, the Redis keys in all and for this cluster, and
the JetStream store's size. A leak shows as a column that grows from round to round; the keys of
each finished cluster stay (the soak never deletes a cluster), so "all keys" grows by the
same count per round and "cluster keys" stays flat.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import httpx
import redis

from record import add_json_option, save  # bench/record.py (this script's folder is on sys.path)

from bke.adapters.bus import EventWatch, put_blob
from bke.adapters.bus.connect import connect_nats
from bke.adapters.bus.streams import OBJECT_BUCKET
from bke.contracts import INSTALL_CLUSTER, InstallCluster
from bke.lab.supervisor import LabSupervisor
from bke.core.plan import plan_spec_text

SEED = Path(__file__).resolve().parent.parent / "examples" / "seed-3m1w.yaml"


def round_spec(i: int) -> str:
    """The seed example renamed to soak<i>, its hostnames suffixed and its addresses moved."""
    text = SEED.read_text()
    text = text.replace("name: seed\n", f"name: soak{i}\n").replace("{name: seed-", f"{{name: soak{i}-")
    text = re.sub(r"hostname: (\w+)", rf"hostname: \1-s{i}", text)
    return text.replace("127.0.10.", f"127.0.{100 + i}.")


def _proc(pid: int) -> tuple[float, int]:
    """(resident MB, open file descriptors) of a live process."""
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = float(line.split()[1]) / 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def one_round(sup: LabSupervisor, i: int, timeout: float) -> tuple[str, float]:
    info = sup.runtime.ensure_started()
    text = round_spec(i)
    outcome = plan_spec_text(text, f"soak{i}")
    assert outcome.plan is not None, outcome.errors
    plan = outcome.plan
    sup.ensure_agents(info, plan)
    nc = await connect_nats(sup.operator_access(info))
    try:
        js = nc.jetstream(timeout=30)
        async with EventWatch(nc, [f"bke.v1.install.{plan.cluster}.finished"]) as watch:
            t0 = time.perf_counter()
            ref = await put_blob(js, OBJECT_BUCKET, f"specs/{plan.cluster}.yaml", text.encode())
            await js.publish(INSTALL_CLUSTER, InstallCluster(request_id=plan.cluster, spec_ref=ref).to_bytes())
            done = await watch.wait_for(lambda e: True, timeout=timeout)
            took = time.perf_counter() - t0
    finally:
        await nc.close()
    for node in plan.nodes:  # the teardown: agents stop their pods (etcd included) as they go
        sup.stop_agent(node.hostname)
    return str(done.data["status"]), took


async def main(rounds: int, timeout: float, json_path: Path | None = None) -> int:
    logging.basicConfig(level=logging.WARNING)
    failures = 0
    rows: list[dict[str, str]] = []
    with tempfile.TemporaryDirectory(prefix="bke-soak-") as d:
        sup = LabSupervisor(Path(d))
        info = sup.ensure_runtime()
        sup.ensure_services(info)
        nc = await connect_nats(sup.operator_access(info))
        await sup.wait_services_ready(nc.jetstream())
        await nc.close()
        rds = redis.Redis.from_url(info.redis_url, decode_responses=True)
        names = sorted(sup.pids()["services"])
        print("round status   secs  " + "  ".join(f"{n[:10]:>10} MB/fd" for n in names)
              + "  redis keys (cluster)  JetStream MB", flush=True)
        try:
            for i in range(1, rounds + 1):
                status, took = await one_round(sup, i, timeout)
                failures += status != "Succeeded"
                cols = []
                for name in names:
                    rss, fds = _proc(sup.pids()["services"][name])
                    cols.append(f"{rss:10.1f} {fds:5d}")
                keys = rds.dbsize()
                mine = sum(1 for _ in rds.scan_iter(match=f"*soak{i}*", count=1000))
                jsz = httpx.get(f"{info.nats_monitor_url}/jsz", timeout=5.0).json()
                print(f"{i:5d} {status:<9}{took:5.1f}  " + "  ".join(cols)
                      + f"  {keys:10d} ({mine:4d})  {jsz.get('storage', 0) / 1e6:12.1f}", flush=True)
                rows.append({"round": str(i), "status": status, "secs": f"{took:.1f}",
                             **{f"{name} MB/fd": " ".join(col.split()) for name, col in zip(names, cols)},
                             "redis keys (cluster)": f"{keys} ({mine})", "JetStream MB": f"{jsz.get('storage', 0) / 1e6:.1f}"})
        finally:
            rds.close()
            sup.down()
    save(json_path, "soak", rows)
    return 1 if failures else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=600.0)
    add_json_option(ap)
    args = ap.parse_args()
    sys.exit(asyncio.run(main(args.rounds, args.timeout, args.json)))
