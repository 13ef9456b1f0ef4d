"""The directory store: node trees at node paths, modes, encrypted .bke, idempotence, least privilege."""
from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

import pytest

from tests.unit.core.pki.test_pki_support import NOW, SERIAL, SPLIT, edited, split_plan

from bke.adapters.pki.store_dir import DirStore
from bke.core.pki import StoreError, ensure_cluster_pki, node_bundle
from bke.core.pki.instances import node_file_refs
from bke.core.plan import Plan
from bke.core.secrets import SecretBox


@pytest.fixture
def box() -> SecretBox:
    return SecretBox(os.urandom(32))


def _ensure(plan: Plan, out: Path, box: SecretBox):  # type: ignore[no-untyped-def]
    return asyncio.run(ensure_cluster_pki(plan, DirStore(out), NOW, box, SERIAL))


def _tree(root: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every file under root: bytes, mode, mtime."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (p.read_bytes(), stat.S_IMODE(st.st_mode), st.st_mtime_ns)
    return out


def test_layout_modes_and_nothing_else(tmp_path: Path, box: SecretBox) -> None:
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    hosts = {n.hostname for n in split_plan().nodes}
    assert {p.name for p in out.iterdir()} == hosts | {".bke"}
    for host, refs in node_file_refs(split_plan()).items():
        on_disk = {"/" + str(p.relative_to(out / host)) for p in (out / host).rglob("*") if p.is_file()}
        assert on_disk == {r.path for r in refs}, host  # exactly the table's files, least privilege
        for r in refs:
            assert stat.S_IMODE((out / host / r.path.lstrip("/")).stat().st_mode) == r.mode
    for d in [out, *(p for p in out.rglob("*") if p.is_dir())]:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    assert sorted(p.name for p in (out / ".bke" / "store").iterdir()) == [
        "etcd-ca.key.enc", "etcd-data-peer-ca.key.enc", "etcd-events-peer-ca.key.enc",
        "etcd-pods-peer-ca.key.enc", "front-proxy-ca.key.enc",
        "super-admin.conf.crt", "super-admin.conf.key.enc"]  # break-glass: on no node


def test_dot_bke_holds_no_clear_private_key(tmp_path: Path, box: SecretBox) -> None:
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    for p in (out / ".bke").rglob("*"):
        if p.is_file():
            raw = p.read_bytes()
            assert b"PRIVATE KEY" not in raw and b"LS0tLS1CRUdJTi" not in raw, p  # PEM, or PEM in base64
            if p.suffix == ".enc":
                assert stat.S_IMODE(p.stat().st_mode) == 0o600
    snap = asyncio.run(DirStore(out).load("big", box))
    assert snap.materials["etcd-ca"].key.startswith(b"-----BEGIN PRIVATE KEY-----")


def test_second_run_changes_no_byte_and_no_mtime(tmp_path: Path, box: SecretBox) -> None:
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    before = _tree(out)
    report = _ensure(split_plan(), out, box)
    assert report.issued == [] and report.reissued == [] and len(report.reused) == 65
    assert _tree(out) == before


def test_deleted_node_file_comes_back_unchanged(tmp_path: Path, box: SecretBox) -> None:
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    before = _tree(out)
    (out / "worker2/etc/kubernetes/pki/ca.crt").unlink()
    report = _ensure(split_plan(), out, box)
    assert report.issued == [] and report.reissued == []
    after = _tree(out)
    assert {k: v[:2] for k, v in after.items()} == {k: v[:2] for k, v in before.items()}


def test_deleted_leaf_key_is_reissued_for_that_node_only(tmp_path: Path, box: SecretBox) -> None:
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    before = _tree(out)
    (out / "etcd2/etc/kubernetes/pki/etcd/peer.key").unlink()
    report = _ensure(split_plan(), out, box)
    assert [(r.instance, r.reason) for r in report.reissued] == [("etcd-data-peer@etcd2", "private key missing")]
    changed = {k for k, v in _tree(out).items() if before.get(k, (None,))[0] != v[0]}
    assert changed == {"etcd2/etc/kubernetes/pki/etcd/peer.crt", "etcd2/etc/kubernetes/pki/etcd/peer.key"}


def test_moved_controller_manager_takes_the_ca_key_along(tmp_path: Path, box: SecretBox) -> None:
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    ca_key = (out / "m4/etc/kubernetes/pki/ca.key").read_bytes()

    def move(docs):  # type: ignore[no-untyped-def]
        for d in docs[1:]:
            roles = d["spec"]["role"]
            if d["spec"]["hostname"] in ("m4", "m5"):
                roles.remove("controller-manager")
            if d["spec"]["hostname"] == "m1":
                roles.append("controller-manager")

    _ensure(edited(SPLIT, move), out, box)
    assert not (out / "m4/etc/kubernetes/pki/ca.key").exists()
    assert not (out / "m4/etc/kubernetes/controller-manager.conf").exists()
    assert not (out / "m5/etc/kubernetes/pki/sa.key").exists()
    assert (out / "m1/etc/kubernetes/pki/ca.key").read_bytes() == ca_key  # same CA, now on m1 only
    assert (out / "m1/etc/kubernetes/controller-manager.conf").read_bytes().count(b"server: https://127.0.20.1:6443") == 1


def test_foreign_directory_and_foreign_cluster_are_refused(tmp_path: Path, box: SecretBox) -> None:
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match="not empty"):
        _ensure(split_plan(), tmp_path / "home", box)
    assert sorted(p.name for p in (tmp_path / "home").iterdir()) == ["notes.txt"]
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    with pytest.raises(StoreError, match="cluster 'big', not 'other'"):
        asyncio.run(DirStore(out).load("other", box))


def test_wrong_secret_key_is_refused(tmp_path: Path, box: SecretBox) -> None:
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    with pytest.raises(StoreError, match="configured key is"):
        _ensure(split_plan(), out, SecretBox(os.urandom(32)))


def test_node_bundle_matches_the_tree(tmp_path: Path, box: SecretBox) -> None:
    out = tmp_path / "out"
    _ensure(split_plan(), out, box)
    for host in ("m1", "m4", "events1", "worker3"):
        files = asyncio.run(node_bundle(split_plan(), DirStore(out), host, box))
        assert [(f.path, f.mode, f.secret) for f in files] == [(r.path, r.mode, r.secret)
                                                              for r in node_file_refs(split_plan())[host]]
        for f in files:
            assert (out / host / f.path.lstrip("/")).read_bytes() == f.content
            assert "BEGIN" not in repr(f)
