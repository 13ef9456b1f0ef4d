"""Host rules per minor: containerd 2 from Kubernetes 1.36 (refused at plan time); cgroup v2 from
1.35 (the preflight `cgroup` check, required unless the spec opts out as upstream allows)."""
from __future__ import annotations

from pathlib import Path

import yaml

from bke.core.artefacts import node_artefacts
from bke.contracts.agent_steps import CheckHost
from bke.core.plan import plan_spec_text
from bke.core.spec.host_rules import kubelet_args, requires_cgroup_v2
from bke.core.spec.synth import synth_docs
from bke_agent.backends.checks import NodeFacts, run_checks
from bke_agent.errors import StepError
from bke_dispatcher.phases import NodeInputs, phase_by_slug

import pytest


def _text(kubernetes: str, containerd: str, etcd: str = "v3.6.6", kubelet: dict[str, str] | None = None) -> str:
    docs = synth_docs(4, kubernetes=kubernetes, containerd=containerd, etcd=etcd)
    if kubelet:
        docs[0]["spec"]["clusterConfig"]["cluster"]["kubelet"] = {"extraArgs": kubelet}
    return yaml.safe_dump_all(docs, sort_keys=False)


def test_containerd_1_7_is_refused_from_kubernetes_1_36() -> None:
    out = plan_spec_text(_text("v1.36.0", "v1.7.27"))
    [err] = out.errors
    assert err.path == "cluster.spec.clusterConfig.cluster.containerdVersion"
    assert "Kubernetes 1.36 needs containerd 2.0 or newer, not 1.7.27" in err.message
    assert plan_spec_text(_text("v1.35.2", "v1.7.27")).ok
    assert plan_spec_text(_text("v1.36.0", "v2.0.5")).ok


def _preflight(text: str) -> CheckHost:
    plan = plan_spec_text(text).plan
    assert plan is not None
    node = plan.nodes[0]
    sums = {a.url(plan.spec.config.http_repo): "0" * 64
            for a in node_artefacts(plan.spec.config, node.arch, registers=node.registers)}
    step = phase_by_slug("node-env").build(plan, node, NodeInputs(render=[], certs=[], checksums=sums))[0]
    assert isinstance(step, CheckHost) and "cgroup" in step.checks
    return step


def test_node_env_requires_cgroup_v2_from_1_35_unless_the_spec_opts_out() -> None:
    assert not _preflight(_text("v1.34.1", "v2.1.1")).require_cgroup_v2
    assert _preflight(_text("v1.35.0", "v2.1.1")).require_cgroup_v2
    assert not _preflight(_text("v1.35.0", "v2.1.1", kubelet={"fail-cgroupv1": "false"})).require_cgroup_v2
    assert _preflight(_text("v1.33.0", "v2.1.1", etcd="v3.5.21", kubelet={"fail-cgroupv1": "true"})).require_cgroup_v2


def test_the_cgroup_check_reads_the_hosts_hierarchy(tmp_path: Path) -> None:
    facts = NodeFacts(tmp_path, "0.0.0.0", lab=False)
    v1 = CheckHost(id="pre", checks=["cgroup"], require_cgroup_v2=True)
    with pytest.raises(StepError) as exc:
        run_checks(facts, v1)
    assert "FAILED cgroup: cgroup v1" in str(exc.value) and "fail-cgroupv1" in str(exc.value)
    assert "ok cgroup: cgroup v1" in run_checks(facts, CheckHost(id="pre", checks=["cgroup"])).stdout
    (tmp_path / "sys/fs/cgroup").mkdir(parents=True)
    (tmp_path / "sys/fs/cgroup/cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert "ok cgroup: cgroup v2" in run_checks(facts, v1).stdout


def test_an_opt_out_on_1_35_is_a_warning() -> None:
    out = plan_spec_text(_text("v1.35.0", "v2.1.1", kubelet={"fail-cgroupv1": "false"}))
    assert out.ok
    assert any(w.startswith("cluster.spec.clusterConfig.cluster.kubelet.extraArgs.fail-cgroupv1: the kubelet of 1.35 will start on cgroup v1") for w in out.warnings)
    assert not [w for w in plan_spec_text(_text("v1.34.0", "v2.1.1", kubelet={"fail-cgroupv1": "false"})).warnings if "cgroup v1" in w]


def test_a_nodes_own_kubelet_args_win_on_that_node_only() -> None:
    docs = synth_docs(4, kubernetes="v1.35.0", containerd="v2.1.1", etcd="v3.6.6")
    docs[0]["spec"]["clusterConfig"]["cluster"]["kubelet"] = {"extraArgs": {"fail-cgroupv1": "true", "v": "2"}}
    docs[2]["spec"]["kubelet"] = {"extraArgs": {"fail-cgroupv1": "false"}}
    plan = plan_spec_text(yaml.safe_dump_all(docs, sort_keys=False)).plan
    assert plan is not None
    assert kubelet_args(plan.spec, "n1") == {"fail-cgroupv1": "false", "v": "2"}
    assert kubelet_args(plan.spec, "n0") == {"fail-cgroupv1": "true", "v": "2"}
    assert [requires_cgroup_v2(plan.spec, n) for n in ("n0", "n1", "n2")] == [True, False, True]
    # another spec (its nodes' args indexed apart from this one's) answers for itself
    docs[2]["spec"]["kubelet"] = {"extraArgs": {"v": "4"}}
    other = plan_spec_text(yaml.safe_dump_all(docs, sort_keys=False)).plan
    assert other is not None
    assert kubelet_args(other.spec, "n1") == {"fail-cgroupv1": "true", "v": "4"}
    assert kubelet_args(plan.spec, "n1") == {"fail-cgroupv1": "false", "v": "2"}
