"""Byte stability: the same input gives identical bytes and digest, whatever the dict insertion
order of extraArgs, and in another interpreter with another hash seed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bke.core.render import diff_rendered

from tests.unit.core.render.test_render_support import golden_spec, plan_of, render, spec_text

ROOT = Path(__file__).resolve().parents[4]
NODES = [("m1", "10.5.0.1", ["master", "etcd"]), ("m2", "10.5.0.2", ["master", "etcd"]),
         ("m3", "10.5.0.3", ["master", "etcd"]), ("w1", "10.5.0.4", ["node"])]


def test_two_renders_are_byte_identical() -> None:
    plan = plan_of(golden_spec("1.35"))
    a, b = render(plan), render(plan)
    assert a.digest == b.digest
    assert [(n.hostname, [(f.path, f.mode, f.content) for f in n.files]) for n in a.nodes] == \
           [(n.hostname, [(f.path, f.mode, f.content) for f in n.files]) for n in b.nodes]
    assert all(d.empty for d in diff_rendered(a, b))


def test_extra_args_order_does_not_change_bytes() -> None:
    args = {"event-ttl": "2h", "audit-log-maxage": "30", "max-requests-inflight": "800", "v": "2"}
    one = spec_text(NODES, cluster={"apiServer": {"extraArgs": args}})
    two = spec_text(NODES, cluster={"apiServer": {"extraArgs": dict(reversed(list(args.items())))}})
    assert one != two  # the spec text differs...
    assert render(plan_of(one)).digest == render(plan_of(two)).digest  # ...the output does not


def test_a_real_change_changes_the_digest_and_only_the_affected_files() -> None:
    base = render(plan_of(spec_text(NODES)))
    changed = render(plan_of(spec_text(NODES, node_extra={"m2": {"apiServer": {"extraArgs": {"v": "4"}}}})))
    assert base.digest != changed.digest
    diffs = {d.hostname: d for d in diff_rendered(base, changed) if not d.empty}
    assert list(diffs) == ["m2"] and diffs["m2"].changed == ("/etc/kubernetes/manifests/kube-apiserver.yaml",)


def test_digest_is_the_same_under_another_hash_seed() -> None:
    code = ("import sys; sys.path.insert(0, 'tests/unit'); from pathlib import Path;"
            "from bke.core.plan import plan_spec_text; from bke.core.render import render_cluster, RenderInputs;"
            "p = plan_spec_text(Path(sys.argv[1]).read_text()).plan;"
            "print(render_cluster(p, RenderInputs(vrrp_password='g0ldenPw')).digest)")
    spec = ROOT / "examples" / "split-etcd.yaml"
    digests = set()
    for seed in ("1", "12345"):
        out = subprocess.run([sys.executable, "-c", code, str(spec)], cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    assert digests == {render(plan_of(spec.read_text())).digest}
