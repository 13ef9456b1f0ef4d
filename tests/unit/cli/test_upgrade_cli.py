"""`bke upgrade plan`: components per node group, the order in counts, findings, exit 2 on refusal."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bke_cli.main import main as bke

from ..upgrade_helpers import SEED, SPLIT


def _spec(tmp_path: Path, example: Path = SEED, etcd: str = "v3.5.32") -> str:
    p = tmp_path / "current.yaml"
    p.write_text(example.read_text().replace("etcdVersion: v3.5.1", f"etcdVersion: {etcd}"))
    return str(p)


def test_plan_prints_versions_order_and_what_was_not_checked(tmp_path: Path, capsys) -> None:
    assert bke(["upgrade", "plan", "--spec", _spec(tmp_path), "--to", "v1.34.1"]) == 0
    out = capsys.readouterr().out
    assert "Upgrade plan for" in out and "kube-apiserver" in out and "1.34.1" in out and "3.6.4" in out
    assert "not checked offline: ClusterHealthy, AgentsAlive, CertificatesExpiry" in out


def test_json_document(tmp_path: Path, capsys) -> None:
    args = ["upgrade", "plan", "--spec", _spec(tmp_path, SPLIT), "--to", "v1.34.1", "--max-unavailable", "2", "-o", "json"]
    assert bke(args) == 0
    doc = json.loads(capsys.readouterr().out)
    comps = {(c["component"], c["group"]): c for c in doc["components"]}
    assert comps[("etcd", "etcd-events")] == {"component": "etcd", "group": "etcd-events", "nodes": 3,
                                              "current": "3.5.32", "target": "3.6.4"}
    assert comps[("containerd", "all nodes")]["current"] == comps[("containerd", "all nodes")]["target"]
    steps = {(s["step"], s["group"]): s for s in doc["order"]}
    assert steps[("workers", "")]["largestBatch"] == 2 and steps[("workers", "")]["drain"] is True
    assert steps[("kube-apiserver", "")]["batches"] == 3
    assert doc["refused"] is False and doc["reasons"] == []


@pytest.mark.parametrize(("args", "message"), [
    (["--to", "v1.35.0", "--etcd-version", "v3.6.5"], "[KubernetesOneMinor] Kubernetes 1.33.2 to 1.35.0 skips a minor"),
    (["--to", "v1.32.0"], "[KubernetesNoDowngrade]"),
    (["--to", "v1.33.5", "--ignore-check", "ClusterHealthy"],
     "--ignore-check ClusterHealthy: ClusterHealthy is mandatory and cannot be ignored"),
    (["--to", "1.34"], "--to: malformed version"),
    (["--to", "v1.33.5", "--max-unavailable", "0"], "--max-unavailable: '0' is not a node count"),
])
def test_refusals_exit_2_with_the_reason(tmp_path: Path, capsys, args: list[str], message: str) -> None:
    assert bke(["upgrade", "plan", "--spec", _spec(tmp_path), *args]) == 2
    assert f"ERROR {message}" in capsys.readouterr().err


def test_seed_to_1_34_needs_the_etcd_minimum_patch_first(tmp_path: Path, capsys) -> None:
    assert bke(["upgrade", "plan", "--spec", _spec(tmp_path, etcd="v3.5.1"), "--to", "v1.34.1"]) == 2
    err = capsys.readouterr().err
    assert "ERROR [EtcdMinimumPatch] etcd 3.5.1 to 3.6.4: every member must run 3.5.32 or later" in err


def test_a_bad_spec_is_refused_like_bke_plan(tmp_path: Path, capsys) -> None:
    assert bke(["upgrade", "plan", "--spec", str(tmp_path / "missing.yaml"), "--to", "v1.34.1"]) == 2
    assert "no such file" in capsys.readouterr().err
