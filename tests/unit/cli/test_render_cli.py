"""`bke render` and `bke versions`: node trees, modes, the persisted VRRP password, stale files,
--diff, exit codes."""
from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from bke_cli.main import main as bke

from tests.unit.core.render.test_render_support import spec_text

NODES = [("m1", "10.8.0.1", ["master", "etcd"]), ("m2", "10.8.0.2", ["master", "etcd"]),
         ("m3", "10.8.0.3", ["master", "etcd"]), ("w1", "10.8.0.4", ["node"])]


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(spec_text(NODES))
    return p


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_render_writes_node_trees_with_modes_and_keeps_the_password(spec: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert bke(["render", str(spec), "--out", str(out)]) == 0
    api = out / "m1/etc/kubernetes/manifests/kube-apiserver.yaml"
    assert api.is_file() and _mode(api) == 0o600
    assert _mode(out / "m2/etc/keepalived/check_apiserver.sh") == 0o755
    assert (out / ".bke/addons/coredns.yaml").is_file()
    password = (out / ".bke/vrrp-password").read_text().strip()
    assert len(password) == 8 and _mode(out / ".bke/vrrp-password") == 0o600
    assert f"auth_pass {password}" in (out / "m3/etc/keepalived/keepalived.conf").read_text()
    first = (out / "m3/etc/keepalived/keepalived.conf").read_bytes()
    assert "cluster t: " in capsys.readouterr().out
    assert bke(["render", str(spec), "--out", str(out)]) == 0
    assert (out / "m3/etc/keepalived/keepalived.conf").read_bytes() == first  # same password, same bytes
    index = json.loads((out / ".bke/rendered.json").read_text())
    assert "/etc/kubernetes/manifests/etcd.yaml" in index["nodes"]["m1"]


def test_a_later_render_removes_only_its_own_stale_files(spec: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert bke(["render", str(spec), "--out", str(out)]) == 0
    cert = out / "m3/etc/kubernetes/pki/ca.crt"  # what `bke certs issue` would have written
    cert.parent.mkdir(parents=True)
    cert.write_text("cert")
    smaller = tmp_path / "smaller.yaml"
    smaller.write_text(spec_text(NODES[:1] + [("m3", "10.8.0.3", ["node"])], endpoint=None))
    assert bke(["render", str(smaller), "--out", str(out)]) == 0
    assert not (out / "m3/etc/kubernetes/manifests/kube-apiserver.yaml").exists()
    assert not (out / "m2/etc/kubernetes/manifests/etcd.yaml").exists()
    assert (out / "m3/var/lib/kubelet/config.yaml").exists() and cert.read_text() == "cert"


def test_diff_lists_changed_files_per_node(spec: Path, tmp_path: Path, capsys) -> None:
    new = tmp_path / "new.yaml"
    new.write_text(spec_text(NODES + [("w2", "10.8.0.5", ["node"])],
                             node_extra={"m2": {"apiServer": {"extraArgs": {"v": "3"}}}}))
    assert bke(["render", "--diff", str(spec), str(new), "--patch"]) == 0
    out = capsys.readouterr().out
    assert "m2:\n  changed /etc/kubernetes/manifests/kube-apiserver.yaml\n" in out
    assert '+    - "--v=3"' in out
    assert "w2:\n  added   /etc/containerd/config.toml" in out
    assert "m1:" not in out and "m3:" not in out
    assert "2 of 5 nodes change" in out


def test_diff_of_identical_specs_changes_nothing(spec: Path, capsys) -> None:
    assert bke(["render", "--diff", str(spec), str(spec)]) == 0
    assert capsys.readouterr().out.strip() == "0 of 4 nodes change (identical output)"


def test_refused_flag_exits_2_with_field_paths(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec_text(NODES, cluster={"apiServer": {"extraArgs": {"etcd-servers": "https://x:1"}}}))
    assert bke(["render", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR cluster.spec.clusterConfig.cluster.apiServer.extraArgs.etcd-servers: ")
    assert not (tmp_path / "o" / "m1").exists()


def test_usage_errors_exit_2(spec: Path) -> None:
    assert bke(["render", str(spec)]) == 2
    assert bke(["render", "--diff", str(spec)]) == 2


def test_versions_json_is_the_table(capsys) -> None:
    assert bke(["versions", "-o", "json", "--gates"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["minor"] for r in doc["kubernetes"]] == ["1.31", "1.32", "1.33", "1.34", "1.35", "1.36", "1.37"]
    assert {r["templates"] for r in doc["containerd"]} == {"containerd/1.7", "containerd/2.0"}
    assert any(g["name"] == "/livez" and g["since"] == "3.5.11" for g in doc["gates"])
    assert bke(["versions"]) == 0 and "1.37" in capsys.readouterr().out
