#!/usr/bin/env python3
"""What joining two workers costs the dispatcher's decisions as the cluster grows. A script, not
a test.

    .venv/bin/python bench/membership.py --nodes 100 1000 5000

For each N: a synthetic cluster of N nodes (bke.core.spec.synth) plus two workers. Prints the time to
start the join record (`new_join`: which install phases each new node runs, read from the PHASES
table) and to walk the whole join's decisions (`next_step`, every command answered), and how
many commands it builds and to whom: always 8, to the two new nodes. (The renderer's render and
the certs service's PKI check of the new plan are whole-plan work in those services: see
bench/render.py and bench/certs.py.)
"""
from __future__ import annotations

import argparse
import time
from datetime import datetime, timezone

import yaml

from record import add_json_option, save  # bench/record.py (this script's folder is on sys.path)

from bke.contracts.membership import JoinNodes
from bke.core.plan import plan_spec_text
from bke.core.spec.synth import synth_docs
from bke_dispatcher.ops.join.decide import apply_result, command_of, new_join, next_step

NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)  # the agents' deadline is not what this measures


def one(n: int) -> dict[str, str]:
    docs = synth_docs(n)
    extra = [d for d in docs if d.get("kind") == "BKENode" and d["spec"]["role"] == ["node"]][-1]
    for i in (1, 2):
        d = yaml.safe_load(yaml.safe_dump(extra))
        d["metadata"]["name"], d["spec"]["hostname"], d["spec"]["ip"] = f"added-{i}", f"added-{i}", f"10.250.0.{i}"
        docs.append(d)
    plan = plan_spec_text(yaml.safe_dump_all(docs, sort_keys=False)).plan
    assert plan is not None
    req = JoinNodes(request_id="b1", cluster=plan.cluster, plan_digest="0" * 64, nodes=["added-1", "added-2"])
    t0 = time.perf_counter()
    j = new_join(req, plan, "t0")
    t1 = time.perf_counter()
    j.asked, j.render, j.certs = True, "Ready", "Ready"
    sealed = frozenset(req.nodes)
    sent: list[str] = []
    while (d := next_step(j, sealed, NOW)).action == "send":
        for run in j.nodes:
            if run.hostname in d.nodes:
                run.command_id, run.status = command_of(j, run), "Running"
                sent.append(run.command_id)
        for run in j.nodes:
            if run.status == "Running":
                apply_result(j, run.command_id, "Succeeded", "", "")
    t2 = time.perf_counter()
    assert d.action == "label", d
    to = sorted({cid.split("/")[2] for cid in sent})
    print(f"{n:>6} nodes: new_join {1000 * (t1 - t0):7.1f} ms, decisions {1000 * (t2 - t1):6.2f} ms, "
          f"{len(sent)} commands, to {', '.join(to)}")
    return {"N": f"{n:,}", "new_join": f"{1000 * (t1 - t0):.1f} ms", "decisions": f"{1000 * (t2 - t1):.2f} ms",
            "commands": str(len(sent)), "to": ", ".join(to)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    add_json_option(ap)
    args = ap.parse_args()
    rows = [one(n) for n in args.nodes]
    save(args.json, "membership", rows)


if __name__ == "__main__":
    main()
