#!/usr/bin/env python3
"""What signing plans and rendered file sets costs (bke.core.secrets.record_signing). A script,
not a test.

    .venv/bin/python bench/record_signatures.py [--nodes 100 1000 5000] [--rounds 9]

For a plan of N nodes (bench/render.py's spec) and for one node's rendered file set (a master's,
the largest), the median of `--rounds` rounds of process CPU:

* ``sign``: what a writer adds per write (RecordSigner.sign: SHA-256 of the stored bytes, one
  Ed25519 signature);
* ``verify``: what a reader adds per read (RecordVerifier.verify);
* ``parse``: what the reader already spent per read, for scale (Plan.model_validate_json for a
  plan; the node's NodeFile list for a file set).

A plan is read once per change of its digest (bke.adapters.state.plans.PlanCache), a file set
once per command built from it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml  # noqa: E402

from bke.core.plan import Plan, build_plan  # noqa: E402
from bke.core.render import RenderInputs, render_cluster  # noqa: E402
from bke.core.secrets.record_signing import RecordSigner  # noqa: E402
from bke.core.spec import load_spec, validate_spec  # noqa: E402
from bke.core.state.nodefiles import NodeFile, file_from_bytes  # noqa: E402
from record import add_json_option, save  # noqa: E402  (bench/record.py, this script's folder)
from render import spec_docs  # noqa: E402  (bench/render.py, this script's folder)


def _cpu(fn: Callable[[], object], rounds: int, inner: int) -> float:
    """Median seconds of process CPU per call."""
    times = []
    for _ in range(rounds):
        t0 = time.process_time()
        for _ in range(inner):
            fn()
        times.append((time.process_time() - t0) / inner)
    return statistics.median(times)


def _plan(nodes: int) -> Plan:
    text = yaml.safe_dump_all(spec_docs(nodes, 3, "v1.33.2", "v3.5.21", "v2.1.1", vip=True))
    loaded = load_spec(text, "bench")
    assert loaded.spec is not None, loaded.errors
    report = validate_spec(loaded.spec)
    assert report.ok, report.errors[:3]
    return build_plan(loaded.spec, report.warnings)


def _row(what: str, data: bytes, parse: Callable[[], object], rounds: int, inner: int) -> dict[str, str]:
    signer = RecordSigner.generate("plan")
    binding = ("inc", "1")
    sig = signer.sign("plan", "bench", binding, data)
    verify = signer.verifier
    t_sign = _cpu(lambda: signer.sign("plan", "bench", binding, data), rounds, inner)
    t_verify = _cpu(lambda: verify.verify("r", "plan", "bench", binding, data, sig), rounds, inner)
    t_parse = _cpu(parse, rounds, max(1, inner // 10))
    row = {"record": what, "size": f"{len(data) / 1e3:.1f} KB", "sign (per write)": f"{t_sign * 1e6:.0f} us",
           "verify (per read)": f"{t_verify * 1e6:.0f} us", "parse (per read, for scale)": f"{t_parse * 1e6:.0f} us"}
    print("  ".join(f"{k} {v}" for k, v in row.items()))
    return row


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    ap.add_argument("--rounds", type=int, default=9)
    add_json_option(ap)
    args = ap.parse_args(argv)
    rows = []
    for n in args.nodes:
        plan = _plan(n)
        raw = plan.to_json().encode()
        rows.append(_row(f"plan, {len(plan.nodes)} nodes", raw, lambda raw=raw: Plan.model_validate_json(raw), args.rounds,
                         max(1, 2000 // n)))
    small = _plan(10)
    master = render_cluster(small, RenderInputs(vrrp_password="benchpw1")).nodes[0]
    files = [file_from_bytes(f.path, f.content, f.mode) for f in master.files]
    node_json = json.dumps([f.model_dump(by_alias=True, mode="json") for f in files]).encode()
    rows.append(_row(f"file set, {master.hostname}", node_json,
                     lambda: [NodeFile.model_validate(d) for d in json.loads(node_json)], args.rounds, 200))
    save(args.json, "record_signatures", rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
