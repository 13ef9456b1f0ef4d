#!/usr/bin/env python3
"""Time to issue a whole cluster's PKI, next to the physical floor. A script, not a test.

    .venv/bin/python bench/certs.py --nodes 5000 [--algorithms RSA-2048,ECDSA-P256] [--procs P] [--repeat R]

For a generated spec of N nodes (3 masters running etcd, the rest workers) and each algorithm:

* ``bke``: ``bke.core.pki.ensure_pki(plan, {}, now, IssueOptions(procs=P))`` - everything the ensure
  step does: instances from the table, verdicts, keys, certificates (PEM), kubeconfig identities,
  manifest and per-node file report. Store I/O is not included. P processes sign, as from the
  CLI: this one and P-1 forked workers.
* ``floor``: the same number of bare key generations + certificate signatures (CN-only
  certificate, no extensions, nothing serialised) with ``cryptography``, in P forked processes,
  wall time including the pool start. Nothing can issue that many certificates faster.
* ``+pem`` (context only): the floor plus writing each key and certificate as PEM, which any
  usable output needs; the gap between ``+pem`` and ``bke`` is what BKE itself adds.

Runs alternate (bke, floor, bke, floor, ...) so that load from elsewhere hits both; the table
shows the best and the median of each and ratio = best bke / best floor. Target: <= 1.3.
``cpu ratio`` compares CPU seconds (this process + its pool workers) instead of wall time: on a
shared machine it is the figure that other people's load disturbs least.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for sub in ("libs", "services/certs"):
    sys.path.insert(0, str(ROOT / sub))

from cryptography import x509  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402
from record import add_json_option, save  # noqa: E402  (bench/record.py, this script's folder)

from bke.core.pki import IssueOptions, desired_instances, ensure_pki  # noqa: E402
from bke.core.pki.keys import generate_key, private_key_pem, signature_hash  # noqa: E402
from bke.core.plan import plan_spec_text  # noqa: E402
from bke.core.spec.synth import synth_spec_text  # noqa: E402


def _floor_chunk(args: tuple[str, int] | tuple[str, int, bool]) -> int:
    """n bare keygen + sign operations: the physical floor's unit of work (+ PEM if asked)."""
    algorithm, n, pem = (*args, False)[:3]  # type: ignore[misc]
    ca_key = generate_key(algorithm)
    issuer = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "floor-ca")])
    now = datetime.now(timezone.utc)
    end, digest = now + timedelta(days=365), signature_hash(ca_key)
    for i in range(n):
        key = generate_key(algorithm)
        cert = x509.CertificateBuilder(
            issuer_name=issuer, subject_name=x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"n{i}")]),
            public_key=key.public_key(), serial_number=x509.random_serial_number(),
            not_valid_before=now, not_valid_after=end).sign(ca_key, digest)
        if pem:
            private_key_pem(key)
            cert.public_bytes(serialization.Encoding.PEM)
    return n


def _cpu() -> float:
    """CPU seconds of this process and of its finished (joined) children."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def timed(fn, *args) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(wall, cpu) seconds of fn(*args)."""
    cpu, wall = _cpu(), time.perf_counter()
    fn(*args)
    return time.perf_counter() - wall, _cpu() - cpu


def floor_run(algorithm: str, ops: int, procs: int, pem: bool = False) -> None:
    if procs == 1:
        _floor_chunk((algorithm, ops, pem))
    else:
        sizes = [ops // procs + (1 if i < ops % procs else 0) for i in range(procs)]
        with ProcessPoolExecutor(procs, mp_context=multiprocessing.get_context("fork")) as pool:
            list(pool.map(_floor_chunk, [(algorithm, s, pem) for s in sizes]))


def bke_run(plan, procs: int) -> None:  # type: ignore[no-untyped-def]
    result = ensure_pki(plan, {}, datetime.now(timezone.utc), IssueOptions(procs=procs, start_method="fork"))
    assert len(result.materials) == len(result.report.issued)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--algorithms", default="RSA-2048,ECDSA-P256")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3, help="alternating runs of each (best is reported)")
    ap.add_argument("--no-pem", dest="pem", action="store_false", help="skip the +pem context column")
    add_json_option(ap)
    args = ap.parse_args(argv)
    rows = []
    print(f"nodes={args.nodes} procs={args.procs} cpus={os.cpu_count()} repeat={args.repeat}")
    print(f"{'algorithm':<11} {'certs':>6} {'bke best':>10} {'bke med':>10} {'floor best':>10} {'floor med':>10} "
          f"{'ratio':>6} {'+pem best':>10} {'cpu ratio':>9}")
    for algorithm in args.algorithms.split(","):
        outcome = plan_spec_text(synth_spec_text(args.nodes, key_algorithm=algorithm))
        if outcome.plan is None:
            print(f"spec error: {outcome.errors}", file=sys.stderr)
            return 2
        ops = len(desired_instances(outcome.plan))
        ours, floor, pem = [], [], []
        for _ in range(args.repeat):
            ours.append(timed(bke_run, outcome.plan, args.procs))
            floor.append(timed(floor_run, algorithm, ops, args.procs))
            if args.pem:
                pem.append(timed(floor_run, algorithm, ops, args.procs, True))
        wall_o, wall_f = [w for w, _ in ours], [w for w, _ in floor]
        cpu_ratio = min(c for _, c in ours) / min(c for _, c in floor)
        print(f"{algorithm:<11} {ops:>6} {min(wall_o):>9.3f}s {statistics.median(wall_o):>9.3f}s "
              f"{min(wall_f):>9.3f}s {statistics.median(wall_f):>9.3f}s {min(wall_o) / min(wall_f):>6.2f} "
              f"{(f'{min(w for w, _ in pem):.3f}s' if pem else '-'):>10} {cpu_ratio:>9.2f}", flush=True)
        rows.append({"nodes": str(args.nodes), "procs": str(args.procs), "repeat": str(args.repeat),
                     "algorithm": algorithm, "certs": str(ops), "bke best": f"{min(wall_o):.3f}s",
                     "bke med": f"{statistics.median(wall_o):.3f}s", "floor best": f"{min(wall_f):.3f}s",
                     "floor med": f"{statistics.median(wall_f):.3f}s", "ratio": f"{min(wall_o) / min(wall_f):.2f}",
                     "+pem best": f"{min(w for w, _ in pem):.3f}s" if pem else "-", "cpu ratio": f"{cpu_ratio:.2f}"})
    save(args.json, "certs", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
