"""Property tests: invariants of placement over generated role layouts."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bke.core.plan import COMPONENTS, parse_overrides, plan_spec_text
from bke.core.spec.roles import is_master

from ..spec_helpers import docs_with_roles, to_text

MASTER_ROLES = st.lists(st.sampled_from(["apiserver", "controller-manager", "scheduler", "etcd", "etcd-event", "etcd-pod", "node"]), unique=True)
OTHER_ROLES = st.lists(st.sampled_from(["node", "etcd", "etcd-event", "etcd-pod"]), min_size=1, unique=True)


@st.composite
def layouts(draw):
    masters = draw(st.lists(MASTER_ROLES.map(lambda r: ["master", *r]), min_size=1, max_size=5))
    others = draw(st.lists(OTHER_ROLES, max_size=8))
    return masters + others


def _odd_etcd(roles: list[list[str]]) -> bool:
    def count(role):
        return sum(role in r for r in roles)

    data = count("etcd") or sum(is_master(r) for r in roles)
    return all(n == 0 or n % 2 == 1 for n in (data, count("etcd-event"), count("etcd-pod")))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_placement_invariants(roles):
    out = plan_spec_text(to_text(docs_with_roles(*roles)))
    if not _odd_etcd(roles):
        assert not out.ok and any("odd number" in e.message for e in out.errors)
        return
    assert out.ok, out.errors
    plan = out.plan
    placed = {c for n in plan.nodes for c in n.components}
    # every control-plane component and etcd-data land on at least one node
    for comp in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd-data", "kubelet", "containerd"):
        assert comp in placed
    # each etcd cluster has an odd member count, and members run that cluster
    for c in plan.etcd_clusters:
        assert len(c.members) % 2 == 1
        assert all(c.name in plan.node(m.hostname).components for m in c.members)
    # control-plane components only on masters; component order canonical
    for n in plan.nodes:
        if any(c in n.components for c in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")):
            assert is_master(n.roles)
        assert n.components == [c for c in COMPONENTS if c in n.components]
    # overrides parse back to exactly the split clusters' members
    parsed = parse_overrides(plan.apiserver.etcd_servers_overrides)
    for c in plan.etcd_clusters:
        urls = [m.client_url for m in c.members]
        if c.name == "etcd-data":
            assert plan.apiserver.etcd_servers.split(",") == urls
        else:
            assert all(parsed[r] == urls for r in c.resources)
    assert set(parsed) == {r for c in plan.etcd_clusters if c.name != "etcd-data" for r in c.resources}
