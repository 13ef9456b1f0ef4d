"""The denylist refuses flags that break security or placement, with field paths: at plan time
(spec validation, shared by the planner and `bke plan`) and again in the renderer, from the same
rules. The documented escape hatch (allowUnsafeFlags) lets them through with a warning."""
from __future__ import annotations

import pytest

from bke.core.flagrules import DENYLIST, go_bool
from bke.core.plan import plan_spec_text
from bke.core.render import DeniedFlagError

from tests.unit.core.render.test_render_support import flags, plan_of, plan_unchecked, pod, render, spec_text

NODES = [("m1", "10.4.0.1", ["master", "etcd"]), ("w1", "10.4.0.2", ["node"])]
C = "cluster.spec.clusterConfig.cluster"


def _denied(**kw) -> list[tuple[str, str]]:
    """The renderer's errors for a plan that skipped validation, checked equal to the planner's."""
    text = spec_text(NODES, endpoint=None, **kw)
    with pytest.raises(DeniedFlagError) as exc:
        render(plan_unchecked(text))
    planned = plan_spec_text(text, "test")
    assert sorted((e.path, e.message) for e in planned.errors) == sorted(exc.value.errors)
    return exc.value.errors


@pytest.mark.parametrize(("component", "flag", "value"), [
    ("apiServer", "etcd-servers", "https://1.2.3.4:2379"),
    ("apiServer", "etcd-servers-overrides", "/events#https://1.2.3.4:2379"),
    ("apiServer", "tls-cert-file", "/tmp/x.crt"),
    ("apiServer", "authorization-mode", "Node,AlwaysAllow"),
    ("apiServer", "disable-admission-plugins", "NodeRestriction"),
    ("apiServer", "disable-admission-plugins", "DefaultStorageClass, NodeRestriction"),
    ("controllerManager", "cluster-signing-key-file", "/tmp/ca.key"),
    ("scheduler", "kubeconfig", "/tmp/k.conf"),
    ("etcd", "listen-client-urls", "http://0.0.0.0:2379"),
    ("etcd", "client-cert-auth", "false"),
    ("etcd", "client-cert-auth", "0"),
    ("etcd", "client-cert-auth", "F"),
    ("etcd", "peer-client-cert-auth", "FALSE"),
    ("etcd", "client-cert-auth", "yes"),  # Go cannot parse it: etcd would not start
    ("etcd", "auto-tls", "1"),
    ("kubelet", "anonymous-auth", "1"),
    ("kubelet", "anonymous-auth", "True"),
    ("kubelet", "authorization-mode", "AlwaysAllow"),
    ("kubelet", "authorization-mode", "webhook"),  # the kubelet's modes are case-sensitive
])
def test_refused_with_its_field_path(component: str, flag: str, value: str) -> None:
    errors = _denied(cluster={component: {"extraArgs": {flag: value}}})
    assert len(errors) == 1
    path, message = errors[0]
    assert path == f"{C}.{component}.extraArgs.{flag}" and "allowUnsafeFlags" in message


def test_value_rules_refuse_only_the_bad_values() -> None:
    rendered = render(plan_of(spec_text(NODES, endpoint=None, cluster={
        "apiServer": {"extraArgs": {"anonymous-auth": "false", "authorization-mode": "Node,RBAC,Webhook"}},
        "etcd": {"extraArgs": {"client-cert-auth": "1", "peer-client-cert-auth": "T", "auto-tls": "f"}},
        "kubelet": {"extraArgs": {"anonymous-auth": "0", "authorization-mode": "Webhook"}}})))
    assert flags(pod(rendered, "m1", "kube-apiserver.yaml"))["authorization-mode"] == "Node,RBAC,Webhook"
    assert flags(pod(rendered, "m1", "etcd.yaml"))["client-cert-auth"] == "1"


def test_apiserver_anonymous_auth_is_upstreams_default_and_not_refused() -> None:
    # Our own liveness probes call /livez anonymously: refusing it would protect nothing.
    rendered = render(plan_of(spec_text(NODES, endpoint=None, cluster={"apiServer": {"extraArgs": {"anonymous-auth": "true"}}})))
    assert flags(pod(rendered, "m1", "kube-apiserver.yaml"))["anonymous-auth"] == "true"
    assert not [r for r in DENYLIST if r.component == "kube-apiserver" and r.flag == "anonymous-auth"]


def test_go_bool_reads_what_strconv_parsebool_reads() -> None:
    assert [go_bool(v) for v in ("1", "t", "T", "TRUE", "true", "True")] == [True] * 6
    assert [go_bool(v) for v in ("0", "f", "F", "FALSE", "false", "False")] == [False] * 6
    assert [go_bool(v) for v in ("yes", "tRUE", "", " true", "on")] == [None] * 5


def test_node_level_flags_are_checked_too_and_all_errors_come_at_once() -> None:
    errors = _denied(cluster={"etcd": {"extraArgs": {"data-dir": "/x"}}},
                     node_extra={"m1": {"apiServer": {"extraArgs": {"secure-port": "7443"}}}})
    assert sorted(p for p, _ in errors) == [f"{C}.etcd.extraArgs.data-dir", "nodes[0].spec.apiServer.extraArgs.secure-port"]


def test_planner_reports_flag_errors_with_the_other_validation_errors() -> None:
    text = spec_text(NODES, endpoint=None, cluster={"etcd": {"extraArgs": {"client-cert-auth": "false"}},
                                                   "networking": {"podSubnet": "not-a-cidr"}})
    paths = {e.path for e in plan_spec_text(text, "test").errors}
    assert {f"{C}.etcd.extraArgs.client-cert-auth", f"{C}.networking.podSubnet"} <= paths


def test_escape_hatch_lets_a_flag_through_with_a_warning() -> None:
    rendered = render(plan_of(spec_text(NODES, endpoint=None, cluster={
        "kubelet": {"extraArgs": {"anonymous-auth": "true"}},
        "allowUnsafeFlags": ["kubelet/anonymous-auth", "never-used"]})))
    assert any("anonymous-auth" in w and "allowed by allowUnsafeFlags" in w for w in rendered.warnings)
    assert len([w for w in rendered.warnings if "'never-used' allowed nothing" in w]) == 1


def test_escape_hatch_is_per_component_when_qualified() -> None:
    errors = _denied(cluster={"kubelet": {"extraArgs": {"authorization-mode": "AlwaysAllow"}},
                              "allowUnsafeFlags": ["kube-apiserver/authorization-mode"]})
    assert errors[0][0] == f"{C}.kubelet.extraArgs.authorization-mode"


def test_overrides_allowed_knowingly_are_still_syntax_checked() -> None:
    from bke.core.render import InvalidOutputError

    text = spec_text(NODES, endpoint=None, cluster={"apiServer": {"extraArgs": {
        "etcd-servers-overrides": "/registry/events#https://10.4.0.1:2379"}}, "allowUnsafeFlags": ["etcd-servers-overrides"]})
    with pytest.raises(InvalidOutputError, match="/registry/events"):
        render(plan_of(text))
    good = spec_text(NODES, endpoint=None, cluster={"apiServer": {"extraArgs": {
        "etcd-servers-overrides": "/events#https://10.4.0.1:2379"}}, "allowUnsafeFlags": ["etcd-servers-overrides"]})
    assert flags(pod(render(plan_of(good)), "m1", "kube-apiserver.yaml"))["etcd-servers-overrides"] == "/events#https://10.4.0.1:2379"


def test_flags_of_etcd_clusters_the_plan_does_not_have_are_inert() -> None:
    rendered = render(plan_of(spec_text(NODES, endpoint=None, cluster={"etcdPods": {"extraArgs": {"data-dir": "/x"}}})))
    assert rendered.file_count > 0


def test_denylist_rows_are_unique() -> None:
    keys = [(r.component, r.flag) for r in DENYLIST]
    assert len(keys) == len(set(keys))
