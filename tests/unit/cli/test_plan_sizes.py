"""Sizes at plan time: nodes against calico's blocks and the controller-manager's node CIDRs,
the service subnet's bounds, warnings near a limit; the acceptance cases through `bke plan`."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from bke.core.plan import plan_spec_text
from bke.core.spec.synth import synth_docs
from bke_cli.main import main as bke

POD = "cluster.spec.clusterConfig.cluster.networking.podSubnet"
SVC = "cluster.spec.clusterConfig.cluster.networking.serviceSubnet"


def _docs(nodes: int, pod_subnet: str | None = None, **cluster: Any) -> list[dict[str, Any]]:
    docs = synth_docs(nodes, pod_subnet=pod_subnet, etcd="v3.5.21")
    cfg = docs[0]["spec"]["clusterConfig"]["cluster"]
    if pod_subnet is not None:
        cfg.setdefault("networking", {})["podSubnet"] = pod_subnet
    for key, value in cluster.items():
        cfg[key] = {**cfg.get(key, {}), **value} if isinstance(value, dict) else value
    return docs


def _outcome(docs: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    return plan_spec_text(yaml.safe_dump_all(docs, sort_keys=False), "test")


def _errors(docs: list[dict[str, Any]]) -> list[str]:
    return [f"{e.path}: {e.message}" for e in _outcome(docs).errors]


def test_bke_plan_refuses_1100_workers_on_the_default_pod_subnet(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "big.yaml"
    spec.write_text(yaml.safe_dump_all(synth_docs(1103, pod_subnet=None, etcd="v3.5.21"), sort_keys=False))
    assert bke(["plan", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"ERROR {POD}: 1103 registered nodes do not fit: calico's /26 IPAM blocks in pool 10.244.0.0/16: 2^(26-16) = 1,024" in err
    assert "/24 node CIDRs the controller-manager allocates from 10.244.0.0/16 (--node-cidr-mask-size default): 2^(24-16) = 256" in err


def test_bke_plan_accepts_1100_workers_on_a_slash_12(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "big.yaml"
    spec.write_text(yaml.safe_dump_all(_docs(1103, "10.128.0.0/12"), sort_keys=False))
    assert bke(["plan", str(spec)]) == 0
    assert "do not fit" not in capsys.readouterr().err


def test_a_users_node_cidr_mask_is_the_limit() -> None:
    # /26 node CIDRs from a /16: 1,024 of them; 300 nodes fit both limits
    docs = _docs(300, "10.244.0.0/16", controllerManager={"extraArgs": {"node-cidr-mask-size": "26"}})
    assert _errors(docs) == []
    docs = _docs(300, "10.244.0.0/16", controllerManager={"extraArgs": {"node-cidr-mask-size-ipv4": "23"}})
    [err] = _errors(docs)
    assert "2^(23-16) = 128" in err and "controllerManager.extraArgs.node-cidr-mask-size-ipv4" in err


def test_allocation_off_or_no_calico_drops_that_limit() -> None:
    off = _docs(300, "10.244.0.0/16", controllerManager={"extraArgs": {"allocate-node-cidrs": "false"}})
    assert _errors(off) == []  # calico's 1,024 blocks hold 300 nodes
    none = _docs(1100, "10.244.0.0/14", cni="none")  # /24s: 2^(24-14) = 1,024; no calico blocks
    [err] = _errors(none)
    assert "2^(24-14) = 1,024" in err and "calico" not in err


def test_within_20_percent_of_a_limit_is_a_warning() -> None:
    out = _outcome(_docs(210, "10.244.0.0/16"))
    assert out.ok
    [warn] = [w for w in out.warnings if w.startswith(POD)]
    assert "210 registered nodes use 82% of /24 node CIDRs" in warn and "2^(24-16) = 256" in warn
    assert not [w for w in _outcome(_docs(200, "10.244.0.0/16")).warnings if w.startswith(POD)]


@pytest.mark.parametrize(("subnet", "needle"), [
    ("10.96.0.0/11", "21 host bits (32-11) > 20; for 32-bit addresses the mask must be >= 12"),
    ("10.96.0.0/29", "holds 8 addresses (2^3), too few for the built-in services"),
    ("fd00::/107", "for 128-bit addresses the mask must be >= 108"),
    ("fd00::/125", "use a /124 or larger"),
])
def test_service_subnet_bounds(subnet: str, needle: str) -> None:
    errs = _errors(_docs(5, networking={"serviceSubnet": subnet}))
    assert any(e.startswith(f"{SVC}: ") and needle in e for e in errs), errs


@pytest.mark.parametrize("subnet", ["10.96.0.0/12", "10.96.0.0/28", "fd00::/108", "fd00::/124"])
def test_service_subnet_within_bounds(subnet: str) -> None:
    assert not [e for e in _errors(_docs(5, networking={"serviceSubnet": subnet})) if e.startswith(SVC)]


def test_ipv6_node_cidrs_at_most_16_bits_longer_than_the_pod_subnet() -> None:
    # cni: none: the controller-manager's rule alone (calico's blocks: the tests below)
    errs = _errors(_docs(5, "fd00:10::/40", cni="none", networking={"serviceSubnet": "fd00:20::/112"}))
    assert any("for IPv6 the node mask may be at most 16 bits longer" in e and "64-40 = 24" in e for e in errs), errs
    assert _errors(_docs(5, "fd00:10::/48", cni="none", networking={"serviceSubnet": "fd00:20::/112"})) == []


def test_calicos_ipv6_blocks_are_counted_with_their_arithmetic() -> None:
    # a /112 holds 2^(122-112) = 1,024 blocks of /122; its /64 node CIDRs... none (64 < 112):
    # node CIDRs of /120 (cluster extraArgs) from it: 2^(120-112) = 256
    args = {"extraArgs": {"node-cidr-mask-size-ipv6": "120"}}
    errs = _errors(_docs(300, "fd00:10::/112", controllerManager=args, networking={"serviceSubnet": "fd00:20::/112"}))
    assert [e for e in errs if "calico" in e] == []  # 300 <= 1,024
    assert any("/120 node CIDRs" in e and "2^(120-112) = 256" in e for e in errs), errs
    small = _errors(_docs(20, "fd00:10::/118", controllerManager=args, networking={"serviceSubnet": "fd00:20::/112"}))
    assert any(f"{POD}: 20 registered nodes do not fit: calico's /122 IPAM blocks in pool fd00:10::/118: "
               "2^(122-118) = 16" in e for e in small), small


def test_a_dual_stack_pair_is_checked_family_by_family() -> None:
    # the IPv4 half is ample; the IPv6 half holds 2^(122-116) = 64 blocks: 100 nodes do not fit there
    args = {"extraArgs": {"node-cidr-mask-size-ipv6": "120"}}
    errs = _errors(_docs(100, "10.128.0.0/12,fd00:10::/116", controllerManager=args))
    assert any("calico's /122 IPAM blocks in pool fd00:10::/116: 2^(122-116) = 64" in e for e in errs), errs
    assert not [e for e in errs if "10.128.0.0/12" in e]
    warned = _outcome(_docs(56, "10.128.0.0/12,fd00:10::/116", controllerManager=args)).warnings
    assert any("56 registered nodes use 88% of calico's /122 IPAM blocks in pool fd00:10::/116" in w for w in warned), warned
    assert _errors(_docs(100, "10.128.0.0/12,fd00:10::/104", controllerManager=args)) == []


def test_a_dual_stack_pair_refuses_the_generic_node_mask_flag() -> None:
    # kube-controller-manager: "usage of --node-cidr-mask-size is not allowed with dual-stack clusters"
    docs = _docs(10, "10.128.0.0/12,fd00:10::/56", controllerManager={"extraArgs": {"node-cidr-mask-size": "24"}})
    errs = _outcome(docs).errors
    assert [e.path for e in errs] == ["cluster.spec.clusterConfig.cluster.controllerManager.extraArgs.node-cidr-mask-size"]
    assert "node-cidr-mask-size-ipv4 and node-cidr-mask-size-ipv6" in errs[0].message
    # single stack keeps taking it
    assert _errors(_docs(10, "10.128.0.0/12", controllerManager={"extraArgs": {"node-cidr-mask-size": "24"}})) == []
