#!/usr/bin/env python3
"""The embedded Redis server: how long it takes to answer, and how fast one client's SET/GET go. A script.

    .venv/bin/python bench/redis_server.py [--server PATH ...] [--starts 5] [--ops 10000]

Each server (the venv's, bke.adapters.runtime.binaries.redis_server_bin, then every `--server` binary,
another Redis to compare with) is started as bke.adapters.runtime.embedded starts it (AOF, fsync every
second, no RDB, an ACL file, the `default` user off) on a free loopback port in a temp dir,
`--starts` times: the time from the process's start to its first answered PING (what the
runtime's readiness probe waits for), and its resident memory then. Then, on one redis-py
connection (no pipeline: one round trip per command), `--ops` SETs and as many GETs of 100-byte
values: as a user allowed everything (an ACL file of one user, which every Redis since 6.0
reads), and as a service under BKE's own ACL file (bke.adapters.runtime.redis_acl; a server that does not
understand its read-only `%R~` patterns refuses the file, and the line says so). Prints one
block per server.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "libs")]

import redis  # noqa: E402
from record import add_json_option, save  # noqa: E402  (bench/record.py, this script's folder)

from bke.adapters.runtime import redis_acl  # noqa: E402
from bke.adapters.runtime.binaries import redis_server_bin  # noqa: E402
from bke.adapters.runtime.processes import free_port  # noqa: E402
from bke.adapters.state.keys.planner import request_key  # noqa: E402

HOST = "127.0.0.1"
PASSWORD = "bench-password"
SERVICE = "planner"  # its own keys (bke:request:*) are read and written below
READY_TIMEOUT_S = 20.0


def _version(server: Path) -> str:
    out = subprocess.run([str(server), "--version"], capture_output=True, text=True, check=False).stdout
    return out.split(" v=", 1)[1].split()[0] if " v=" in out else out.strip()


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _start(server: Path, workdir: Path, acl_text: str, user: str, password: str) -> tuple[subprocess.Popen[bytes], int, float]:
    """The server as the runtime starts it; (process, port, seconds to the first PING answered)."""
    workdir.mkdir(parents=True, exist_ok=True)
    aclfile = workdir / "users.acl"
    aclfile.write_text(acl_text)
    port = free_port(HOST)
    argv = [str(server), "--bind", HOST, "--port", str(port), "--dir", str(workdir), "--appendonly", "yes",
            "--appendfsync", "everysec", "--save", "", "--daemonize", "no", "--logfile", "", "--aclfile", str(aclfile)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir)
    client = redis.Redis(host=HOST, port=port, username=user, password=password, socket_timeout=1.0,
                         socket_connect_timeout=1.0)
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{server.name} exited with {proc.returncode} at its start")
            try:
                if client.ping():
                    return proc, port, time.perf_counter() - t0
            except (redis.ConnectionError, redis.BusyLoadingError):
                pass
            if time.perf_counter() - t0 > READY_TIMEOUT_S:
                raise RuntimeError(f"{server.name} did not answer within {READY_TIMEOUT_S} s")
            time.sleep(0.001)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        client.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _ops(port: int, user: str, password: str, n: int) -> tuple[float, float]:
    """(SETs per second, GETs per second) on one connection, one round trip each."""
    client = redis.Redis(host=HOST, port=port, username=user, password=password)
    value = b"v" * 100
    keys = [request_key(f"bench-{i}") for i in range(n)]
    try:
        client.ping()
        t0 = time.perf_counter()
        for key in keys:
            client.set(key, value)
        t1 = time.perf_counter()
        for key in keys:
            client.get(key)
        t2 = time.perf_counter()
    finally:
        client.close()
    return n / (t1 - t0), n / (t2 - t1)


def bench(server: Path, starts: int, n: int) -> dict[str, str]:
    sha = hashlib.sha256(PASSWORD.encode()).hexdigest()
    plain = f"user default off resetkeys resetchannels -@all\nuser bench on #{sha} ~* &* +@all\n"
    print(f"{server.name} {_version(server)} ({server})", flush=True)
    row = {"server": f"{server.name} {_version(server)}"}
    with tempfile.TemporaryDirectory(prefix="bke-bench-redis-") as tmp:
        times, rss = [], []
        for i in range(starts):
            proc, port, took = _start(server, Path(tmp) / f"start{i}", plain, "bench", PASSWORD)
            times.append(took)
            rss.append(_rss_mb(proc.pid))
            if i < starts - 1:
                _stop(proc)
        print(f"  start to first PING: median {1000 * statistics.median(times):.1f} ms (min {1000 * min(times):.1f}, "
              f"max {1000 * max(times):.1f}) over {starts} starts; RSS then {statistics.median(rss):.1f} MB", flush=True)
        row["start to first PING"] = (f"median {1000 * statistics.median(times):.1f} ms (min {1000 * min(times):.1f}, "
                                      f"max {1000 * max(times):.1f}) over {starts} starts")
        row["RSS then"] = f"{statistics.median(rss):.1f} MB"
        try:
            sets, gets = _ops(port, "bench", PASSWORD, n)
        finally:
            _stop(proc)
        print(f"  one user allowed everything: {n:,} SET {sets:,.0f}/s, {n:,} GET {gets:,.0f}/s", flush=True)
        row["one user allowed everything"] = f"{n:,} SET {sets:,.0f}/s, {n:,} GET {gets:,.0f}/s"

        passwords = {u.name: PASSWORD for u in redis_acl.USERS}
        user = redis_acl.SERVICE_USER[SERVICE]
        try:
            proc, port, _ = _start(server, Path(tmp) / "bke-acl", redis_acl.acl_file_text(passwords), redis_acl.ADMIN,
                                   PASSWORD)
        except RuntimeError as exc:
            print(f"  {user} under BKE's ACL file: refused ({exc}: no read-only `%R~` patterns before Redis 7)")
            row["a service under BKE's ACL file"] = f"{user}: refused (no read-only `%R~` patterns before Redis 7)"
            return row
        try:
            sets, gets = _ops(port, user, PASSWORD, n)
        finally:
            _stop(proc)
        print(f"  {user} under BKE's ACL file: {n:,} SET {sets:,.0f}/s, {n:,} GET {gets:,.0f}/s", flush=True)
        row["a service under BKE's ACL file"] = f"{user}: {n:,} SET {sets:,.0f}/s, {n:,} GET {gets:,.0f}/s"
        return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="append", type=Path, default=[], help="another server binary to compare with")
    ap.add_argument("--starts", type=int, default=5)
    ap.add_argument("--ops", type=int, default=10_000)
    add_json_option(ap)
    args = ap.parse_args(argv)
    load = f"{os.getloadavg()[0]:.1f}"
    print(f"one machine, {os.cpu_count()} CPUs, load {load}", flush=True)
    rows = [{**bench(server, args.starts, args.ops), "load at start": load} for server in [redis_server_bin(), *args.server]]
    save(args.json, "redis_server", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
