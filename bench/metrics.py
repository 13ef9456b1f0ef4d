#!/usr/bin/env python3
"""Time of one scrape of the dispatcher's /metrics against a stored N-node install. A script.

    .venv/bin/python bench/metrics.py --nodes 5000 10000 [--scrapes 20]

For each size: a Redis of its own (the embedded runtime, in a temp dir), a generated N-node
plan stored as the planner stores it, and the dispatcher's records written directly as its
state module writes them mid-install: the install, every phase (the first ones Succeeded, one
Running), a command per node for each phase done or running, and the node hash (60% Succeeded,
25% Running, the rest no record yet). Then the dispatcher's HTTP side (bke.adapters.http, the same app
and server a service runs) with its domain figures (bke_dispatcher.metrics) answers
`GET /metrics` over loopback: the first scrape (the plan's cache is cold) and the median and
worst of `--scrapes` more. Prints one line per size.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / p) for p in ("libs", "services/dispatcher")]

from record import add_json_option, save  # noqa: E402  (bench/record.py, this script's folder)

import httpx  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from bke.adapters.bus.readiness import Readiness  # noqa: E402
from bke.adapters.http.app import build_app  # noqa: E402
from bke.adapters.http.metrics import ServiceMetrics  # noqa: E402
from bke.adapters.http.server import HttpServer  # noqa: E402
from bke.core.plan import plan_spec_text  # noqa: E402
from bke.adapters.runtime import EmbeddedRuntime  # noqa: E402
from bke.core.spec.synth import synth_spec_text  # noqa: E402
from bke.adapters.state import PlanCache, RedisPlanStore, plan_digest  # noqa: E402
from bke.adapters.state.keys.dispatcher import (  # noqa: E402
    command_key, install_key, installs_index, node_status_key, phase_key,
)
from bke_dispatcher.metrics import DispatcherFigures  # noqa: E402
from bke_dispatcher.phases import PHASES  # noqa: E402


async def _store(redis: Redis, nodes: int) -> str:
    outcome = plan_spec_text(synth_spec_text(nodes, name=f"bench{nodes}"))
    assert outcome.plan is not None, outcome.errors
    plan = outcome.plan
    pj = plan.to_json()
    c = plan.cluster
    await RedisPlanStore(redis).save(plan, pj, plan_digest(pj), "bench", "t0")
    hosts = [n.hostname for n in plan.nodes]
    running = len(PHASES) // 2
    async with redis.pipeline(transaction=False) as pipe:
        pipe.hset(install_key(c), mapping={"requestId": "bench", "status": "Running", "startedAt": "t0"})
        pipe.sadd(installs_index(), c)
        for i, phase in enumerate(PHASES):
            status = "Succeeded" if i < running else "Running" if i == running else "Pending"
            pipe.hset(phase_key(c, phase.slug), mapping={"status": status, "total": nodes, "ok": nodes})
            if i <= running:
                pipe.hset(command_key(c, phase.slug), mapping={
                    h: json.dumps({"id": f"{c}/{phase.slug}/{h}/0", "gen": 0, "status": "Succeeded", "step": "",
                                   "stderr": "", "at": "t1"}) for h in hosts})
        done, busy = int(nodes * 0.6), int(nodes * 0.25)
        pipe.hset(node_status_key(c), mapping={
            h: json.dumps({"phase": PHASES[running].slug, "status": "Succeeded" if i < done else "Running", "step": None})
            for i, h in enumerate(hosts[: done + busy])})
        await pipe.execute()
    return c


async def run(nodes: int, scrapes: int) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as tmp:
        rt = EmbeddedRuntime(Path(tmp) / "runtime", auth=False)
        info = rt.ensure_started()
        redis = Redis.from_url(info.redis_url)
        server = None
        try:
            cluster = await _store(redis, nodes)
            metrics = ServiceMetrics("dispatcher")
            metrics.refreshers.append(DispatcherFigures(metrics, redis, PlanCache(redis)).refresh)
            server = HttpServer(build_app("dispatcher", metrics, Readiness("dispatcher", ()).snapshot, []),
                                "127.0.0.1", 0, "bench")
            await server.start()
            async with httpx.AsyncClient(base_url=server.url, timeout=60, trust_env=False) as http:
                t0 = time.perf_counter()
                first = await http.get("/metrics")
                cold = time.perf_counter() - t0
                assert f'bke_nodes{{cluster="{cluster}",state="Running"}} {float(int(nodes * 0.25))}' in first.text
                times = []
                for _ in range(scrapes):
                    t0 = time.perf_counter()
                    r = await http.get("/metrics")
                    times.append(time.perf_counter() - t0)
                    r.raise_for_status()
            print(f"{nodes:>6} nodes: first scrape {cold * 1000:.0f} ms (plan cache cold), then median "
                  f"{statistics.median(times) * 1000:.1f} ms, worst {max(times) * 1000:.1f} ms over {scrapes}; "
                  f"{len(first.content)} bytes", flush=True)
            return {"N": f"{nodes:,}", "first scrape (plan cache cold)": f"{cold * 1000:.0f} ms",
                    "median": f"{statistics.median(times) * 1000:.1f} ms", "worst": f"{max(times) * 1000:.1f} ms",
                    "scrapes": str(scrapes), "bytes": str(len(first.content))}
        finally:
            if server is not None:
                await server.stop()
            await redis.aclose()
            rt.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[5000, 10000])
    ap.add_argument("--scrapes", type=int, default=20)
    add_json_option(ap)
    args = ap.parse_args(argv)
    rows = [asyncio.run(run(n, args.scrapes)) for n in args.nodes]
    save(args.json, "metrics", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
