"""extraArgs merge: defaults < presets < cluster < node, per flag; feature gates per gate; sorted output."""
from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bke.core.render import format_flags, merge_args

from tests.unit.core.render.test_render_support import flags, plan_of, pod, render, spec_text

NODES = [("m1", "10.3.0.1", ["master", "etcd"]), ("m2", "10.3.0.2", ["master", "etcd"]),
         ("m3", "10.3.0.3", ["master", "etcd"])]

names = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True).filter(lambda n: n != "feature-gates")
layers = st.dictionaries(names, st.text(alphabet="abc123=,/.", max_size=8), max_size=6)


@given(st.lists(layers, min_size=1, max_size=4))
def test_later_layer_wins_per_flag_and_keeps_the_rest(ls: list[dict[str, str]]) -> None:
    merged = merge_args(*ls)
    assert set(merged) == set().union(*ls)
    for flag, value in merged.items():
        assert value == [layer[flag] for layer in ls if flag in layer][-1]


@given(layers)
def test_output_is_sorted_and_independent_of_insertion_order(layer: dict[str, str]) -> None:
    reversed_layer = dict(reversed(list(layer.items())))
    out = format_flags(merge_args(layer))
    assert out == format_flags(merge_args(reversed_layer)) == sorted(out, key=lambda f: f[2:].split("=", 1)[0])


def test_feature_gates_merge_per_gate() -> None:
    merged = merge_args({"feature-gates": "A=true,B=true"}, {"feature-gates": "B=false,C=true"}, {"x": "1"})
    assert merged == {"feature-gates": "A=true,B=false,C=true", "x": "1"}


def test_admission_plugins_are_added_to_bkes_never_replacing_them() -> None:
    merged = merge_args({"enable-admission-plugins": "NodeRestriction"}, {"enable-admission-plugins": "PodSecurity"},
                        {"enable-admission-plugins": " NodeRestriction,EventRateLimit "})
    assert merged == {"enable-admission-plugins": "NodeRestriction,PodSecurity,EventRateLimit"}


def test_a_users_admission_plugins_keep_node_restriction_and_no_bootstrap_tokens_unless_asked() -> None:
    text = spec_text(NODES, endpoint=None, cluster={"apiServer": {"extraArgs": {"enable-admission-plugins": "PodSecurity",
                                                                                "disable-admission-plugins": "DefaultStorageClass"}}},
                     node_extra={"m2": {"apiServer": {"extraArgs": {"enable-bootstrap-token-auth": "true"}}}})
    rendered = render(plan_of(text))
    m1, m2 = flags(pod(rendered, "m1", "kube-apiserver.yaml")), flags(pod(rendered, "m2", "kube-apiserver.yaml"))
    assert m1["enable-admission-plugins"] == m2["enable-admission-plugins"] == "NodeRestriction,PodSecurity"
    assert m1["disable-admission-plugins"] == "DefaultStorageClass"  # any plugin but NodeRestriction may go
    assert "enable-bootstrap-token-auth" not in m1  # BKE uses no bootstrap token
    assert m2["enable-bootstrap-token-auth"] == "true"  # the spec asked for it on m2


def test_node_overrides_one_flag_and_keeps_cluster_and_defaults() -> None:
    text = spec_text(NODES, endpoint=None,
                     cluster={"apiServer": {"extraArgs": {"event-ttl": "2h", "max-requests-inflight": "800",
                                                          "feature-gates": "MyGate=true"}}},
                     node_extra={"m2": {"apiServer": {"extraArgs": {"max-requests-inflight": "1200"}}}})
    rendered = render(plan_of(text))
    m1, m2 = flags(pod(rendered, "m1", "kube-apiserver.yaml")), flags(pod(rendered, "m2", "kube-apiserver.yaml"))
    assert (m1["max-requests-inflight"], m2["max-requests-inflight"]) == ("800", "1200")
    assert m1["event-ttl"] == m2["event-ttl"] == "2h"
    assert m2["authorization-mode"] == "Node,RBAC" and m2["advertise-address"] == "10.3.0.2"
    assert m2["feature-gates"] == "ConsistentListFromCache=true,MyGate=true"
    assert m2["goaway-chance"] == "0.001"  # the preset survives both layers


def test_etcd_clusters_take_their_own_extra_args() -> None:
    nodes = NODES + [("v1", "10.3.0.11", ["etcd-event"])]
    text = spec_text(nodes, endpoint=None, cluster={"etcd": {"extraArgs": {"snapshot-count": "5000"}},
                                                    "etcdEvents": {"extraArgs": {"quota-backend-bytes": "4294967296"}}})
    rendered = render(plan_of(text))
    data, events = flags(pod(rendered, "m1", "etcd.yaml")), flags(pod(rendered, "v1", "etcd-events.yaml"))
    assert data["snapshot-count"] == "5000" and events["snapshot-count"] == "10000"
    assert events["quota-backend-bytes"] == "4294967296" and data["quota-backend-bytes"] == "2147483648"


def test_kubelet_extra_args_reach_the_unit_quoted_for_systemd() -> None:
    text = spec_text(NODES, endpoint=None, cluster={"kubelet": {"extraArgs": {"v": "2", "node-labels": "a=b c"}}})
    unit = render(plan_of(text)).node("m3").file("/etc/systemd/system/kubelet.service").content.decode()
    assert "    --v=2" in unit and '    "--node-labels=a=b c"' in unit
