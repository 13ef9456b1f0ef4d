#!/usr/bin/env python3
"""Bus identities at scale: mint N agent identities, then show one running nats-server accepts a
sample of them with no reload, and that a revocation reaches it without one. A script, not a test.

    .venv/bin/python bench/identities.py --agents 10000 --sample 200

Prints the time per 1,000 identities minted (key + signed user JWT + creds text, as
`bke identities provision` makes them; the registry write to Redis is not included), the
connect time of the sample, the server's PID and config-reload count before and after (from
/varz: `config_load_time` does not move), and the time for a revocation to cut a live connection.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx
import nats

from record import add_json_option, save  # bench/record.py (this script's folder is on sys.path)

from bke.adapters.auth import agent_permissions, identity_name, inbox_prefix, write_creds
from bke.adapters.auth.push import push_account
from bke.adapters.bus.connect import BusAccess, connect_options
from bke.adapters.runtime import EmbeddedRuntime


def _varz(monitor: str) -> dict:
    with httpx.Client(trust_env=False, timeout=5) as c:
        return c.get(f"{monitor}/varz").json()


async def run(agents: int, sample: int, workdir: Path) -> list[dict[str, str]]:
    rt = EmbeddedRuntime(workdir / "runtime", auth=True)
    info = rt.ensure_started()
    assert rt.nats_auth is not None
    authority = rt.nats_auth.authority
    try:
        before = _varz(info.nats_monitor_url)
        users = []
        lap = time.perf_counter()
        t0 = lap
        now = int(time.time())
        for i in range(agents):
            node = f"n{i}"
            users.append((node, authority.user(identity_name("agent", "bench", node), agent_permissions("bench", node),
                                               iat=now)))
            if (i + 1) % 1000 == 0:
                t = time.perf_counter()
                print(f"minted {i + 1:>6}: {t - lap:.2f} s for the last 1,000", flush=True)
                lap = t
        total = time.perf_counter() - t0
        print(f"minted {agents} agent identities in {total:.1f} s ({1000 * total / agents:.2f} s per 1,000)")
        rows = [{"figure": "minted", "value": f"{agents} agent identities in {total:.1f} s ({1000 * total / agents:.2f} s per 1,000)"}]

        picked = random.Random(1).sample(users, min(sample, len(users)))
        conns = []
        t0 = time.perf_counter()
        for node, user in picked:
            creds = write_creds(workdir / "creds" / f"{user.name}.creds", user.creds)
            opts = connect_options(BusAccess(info.nats_url, creds, inbox_prefix(user.name)))
            opts.update(allow_reconnect=False, max_reconnect_attempts=0)
            nc = await nats.connect(**opts)
            await nc.publish(f"bke.v1.heartbeat.bench.{node}", b"{}")
            await nc.flush()
            conns.append(nc)
        connect_s = time.perf_counter() - t0
        after = _varz(info.nats_monitor_url)
        print(f"connected {len(conns)} sampled identities (of {agents}) in {connect_s:.2f} s; "
              f"server pid {info.nats_pid}, connections now {after['connections']}")
        print(f"config_load_time before {before['config_load_time']} after {after['config_load_time']} "
              f"(unchanged: {before['config_load_time'] == after['config_load_time']}), same server: "
              f"{before['server_id'] == after['server_id']}")
        rows.append({"figure": "connected", "value": f"{len(conns)} sampled identities (of {agents}) in {connect_s:.2f} s; "
                     f"config_load_time unchanged: {before['config_load_time'] == after['config_load_time']}, same server: "
                     f"{before['server_id'] == after['server_id']}"})

        victim, rest = conns[0], conns[1:]
        authority.revoke(picked[0][1].public, int(time.time()))
        t0 = time.perf_counter()
        await push_account(info.nats_url, rt.nats_auth.system_creds, authority, iat=int(time.time()))
        while not victim.is_closed and time.perf_counter() - t0 < 10:
            await asyncio.sleep(0.005)  # measuring how soon the server closes it
        closed_after = time.perf_counter() - t0
        still = sum(1 for c in rest if c.is_connected)
        unchanged = _varz(info.nats_monitor_url)['config_load_time'] == before['config_load_time']
        print(f"revocation: live connection closed={victim.is_closed} after {closed_after:.3f} s; "
              f"others still connected: {still}/{len(rest)}; "
              f"config_load_time unchanged: {unchanged}")
        rows.append({"figure": "revocation", "value": f"live connection closed={victim.is_closed} after {closed_after:.3f} s; "
                     f"others still connected: {still}/{len(rest)}; config_load_time unchanged: {unchanged}"})
        for c in rest:
            await c.close()
        return rows
    finally:
        rt.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=10_000)
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=None)
    add_json_option(ap)
    args = ap.parse_args(argv)
    if args.workdir is not None:
        rows = asyncio.run(run(args.agents, args.sample, args.workdir))
    else:
        with tempfile.TemporaryDirectory(prefix="bke-ids-bench-") as tmp:
            rows = asyncio.run(run(args.agents, args.sample, Path(tmp)))
    save(args.json, "identities", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
