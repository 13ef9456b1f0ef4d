#!/usr/bin/env python3
"""What `bke apply --dry-run` costs the planner at scale. A script, not a test.

    .venv/bin/python bench/diff.py --nodes 1000 5000 10000

For each N: a synthetic split cluster of N nodes (bke.core.spec.synth), its plan, and a changed spec
with two more workers. Prints the time to place the changed spec, to render both plans and
compare them (`render_diff`), and to take the decision (`diff_plans`), and checks that only the
two new nodes are touched.
"""
from __future__ import annotations

import argparse
import time

import yaml

from record import add_json_option, save  # bench/record.py (this script's folder is on sys.path)

from bke.core.lifecycle.diff import diff_plans, render_diff
from bke.core.plan import plan_spec_text
from bke.core.spec.synth import synth_docs


def one(n: int) -> dict[str, str]:
    docs = synth_docs(n, split=True)
    text = yaml.safe_dump_all(docs, sort_keys=False)
    current = plan_spec_text(text).plan
    assert current is not None
    extra = [dict(d) for d in docs if d.get("kind") == "BKENode"][-1]
    added = []
    for i in (1, 2):
        d = yaml.safe_load(yaml.safe_dump(extra))
        d["metadata"]["name"] = f"added-{i}"
        d["spec"]["hostname"] = f"added-{i}"
        d["spec"]["ip"] = f"10.250.0.{i}"
        added.append(d)
    changed = yaml.safe_dump_all(docs + added, sort_keys=False)
    t0 = time.perf_counter()
    desired = plan_spec_text(changed).plan
    assert desired is not None
    t1 = time.perf_counter()
    files = render_diff(current, desired)
    t2 = time.perf_counter()
    d = diff_plans(current, desired, files)
    t3 = time.perf_counter()
    assert d.touched_hosts() == ["added-1", "added-2"], d.touched_hosts()[:5]
    print(f"{n:>6} nodes: place {t1 - t0:6.2f} s  render both + compare {t2 - t1:6.2f} s  decide {t3 - t2:6.3f} s  "
          f"total {t3 - t0:6.2f} s  actions {len(d.actions)}")
    return {"N": f"{n:,}", "place": f"{t1 - t0:.2f} s", "render both + compare": f"{t2 - t1:.2f} s",
            "decide": f"{t3 - t2:.3f} s", "total": f"{t3 - t0:.2f} s", "actions": str(len(d.actions))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    add_json_option(ap)
    args = ap.parse_args()
    rows = [one(n) for n in args.nodes]
    save(args.json, "diff", rows)


if __name__ == "__main__":
    main()
