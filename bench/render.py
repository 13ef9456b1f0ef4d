#!/usr/bin/env python3
"""Render + validation time for an N-node cluster.

    .venv/bin/python bench/render.py --nodes 5000              # 5 masters, split etcd, N-14 workers
    .venv/bin/python bench/render.py --nodes 5000 --masters 4991 --no-vip   # worst case: every node a master

Every file is rendered, parsed back and validated (kubernetes-validate strict for every pod and
addon object, our models for the rest), exactly as the service does; nothing is cached between
nodes except compiled templates and schemas. Prints one line per phase and the per-node figure.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / p) for p in ("libs",)]

from bke.core.plan import build_plan  # noqa: E402
from bke.core.render import RenderInputs, render_cluster  # noqa: E402
from bke.core.spec import load_spec, validate_spec  # noqa: E402
from bke.core.spec.synth import lab_ip  # noqa: E402
import yaml  # noqa: E402
from record import add_json_option, save  # noqa: E402  (bench/record.py, this script's folder)


def spec_docs(nodes: int, masters: int, kubernetes: str, etcd: str, containerd: str, vip: bool) -> list[dict]:
    """`masters` masters (behind a VIP, or the first master as the endpoint), 3 etcd-data +
    3 etcd-events + 3 etcd-pods nodes, the rest workers."""
    roles = [["master"]] * masters + [["etcd"]] * 3 + [["etcd-event"]] * 3 + [["etcd-pod"]] * 3
    roles += [["node"]] * max(0, nodes - len(roles))
    docs = [{"apiVersion": "bke.bocloud.com/v1beta1", "kind": "BKECluster", "metadata": {"name": "bench"},
             "spec": {"controlPlaneEndpoint": {"host": "127.99.255.250", "port": 36443} if vip else
                      {"host": lab_ip(0), "port": 6443},
                      "clusterConfig": {"cluster": {"kubernetesVersion": kubernetes, "etcdVersion": etcd,
                                                    "containerdVersion": containerd,
                                                    # /10: 16,384 node CIDRs of /24, room for any bench size
                                                    "networking": {"podSubnet": "10.0.0.0/10"}}}}}]
    docs += [{"apiVersion": "bke.bocloud.com/v1beta1", "kind": "BKENode", "metadata": {"name": f"bench-n{i}"},
              "spec": {"hostname": f"n{i}", "ip": lab_ip(i), "role": r}} for i, r in enumerate(roles)]
    return docs


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--masters", type=int, default=5)
    ap.add_argument("--kubernetes", default="v1.33.2")
    ap.add_argument("--etcd", default="v3.5.21")
    ap.add_argument("--containerd", default="v2.1.1")
    ap.add_argument("--no-vip", action="store_true", help="endpoint on the first master: no haproxy/keepalived "
                    "(needed beyond 150 masters, where VRRP priorities run out)")
    add_json_option(ap)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    text = yaml.safe_dump_all(spec_docs(args.nodes, args.masters, args.kubernetes, args.etcd, args.containerd,
                                        vip=not args.no_vip))
    loaded = load_spec(text, "bench")
    assert loaded.spec is not None, loaded.errors
    report = validate_spec(loaded.spec)
    assert report.ok, report.errors[:3]
    plan = build_plan(loaded.spec, report.warnings)
    t1 = time.perf_counter()
    inputs = RenderInputs(vrrp_password="benchpw1")
    render_cluster(plan, inputs)  # warm-up: templates and schemas compiled once per process
    t2 = time.perf_counter()
    rendered = render_cluster(plan, inputs)
    t3 = time.perf_counter()
    pods = sum(1 for n in rendered.nodes for f in n.files if f.path.startswith("/etc/kubernetes/manifests/"))
    size = sum(len(f.content) for n in rendered.nodes for f in n.files)
    print(f"nodes {len(plan.nodes)} (masters {args.masters}), tier {rendered.tier}, files {rendered.file_count}, "
          f"static pods {pods}, {size / 1e6:.1f} MB")
    print(f"spec+plan            {t1 - t0:8.3f} s")
    print(f"first render (cold)  {t2 - t1:8.3f} s   (includes template and schema compilation)")
    print(f"render+validation    {t3 - t2:8.3f} s   = {(t3 - t2) / len(plan.nodes) * 1e3:.3f} ms per node, "
          f"{(t3 - t2) / rendered.file_count * 1e3:.3f} ms per file")
    save(args.json, "render", [{
        "nodes": str(len(plan.nodes)), "masters": str(args.masters), "tier": f"{rendered.tier}",
        "files": str(rendered.file_count), "static pods": str(pods), "size": f"{size / 1e6:.1f} MB",
        "spec+plan": f"{t1 - t0:.3f} s", "first render (cold)": f"{t2 - t1:.3f} s",
        "render+validation": f"{t3 - t2:.3f} s", "per node": f"{(t3 - t2) / len(plan.nodes) * 1e3:.3f} ms",
        "per file": f"{(t3 - t2) / rendered.file_count * 1e3:.3f} ms"}])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
