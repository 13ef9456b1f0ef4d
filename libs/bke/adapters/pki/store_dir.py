"""Directory store: ``DIR/<hostname>/<absolute node path>`` trees plus ``DIR/.bke/``.

Layout (what ``bke certs issue --out DIR`` produces)::

    DIR/<hostname>/etc/kubernetes/pki/...   each node's files, at their node paths (keys 0600)
    DIR/.bke/manifest.json                  which node file holds which instance (no secrets)
    DIR/.bke/store/<id>.crt / <id>.key.enc  material that belongs on no node (the etcd and
                                            front-proxy CA keys...): keys AES-GCM encrypted
    DIR/.bke/secret.key                     only if the CLI created the at-rest key here

Nothing else is written to DIR; every directory is 0700. Files are replaced atomically and only
when their bytes change, so a second identical run leaves every byte and mtime as it was.
Files this store wrote earlier that the new plan no longer gives a node (e.g. ``ca.key`` after
kube-controller-manager moved) are deleted: least privilege holds across runs, too.
"""
from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from pathlib import Path

from bke.core.secrets import DecryptError, SecretBox
from bke.core.pki.bundle import render_file
from bke.core.pki.errors import StoreConflict, StoreError
from bke.core.pki.kubeconfig import embedded_material
from bke.core.pki.manifest import Manifest
from bke.core.pki.material import Material
from bke.core.pki.store import Snapshot, key_aad

__all__ = ["DirStore"]

_CERT_PARTS = ("cert", "pub", "kubeconfig")
_KEY_PARTS = ("key", "kubeconfig")


def _check_host(host: str) -> str:
    if not host or host.startswith(".") or "/" in host or "\0" in host:
        raise StoreError(f"refusing node name {host!r} as a folder name")
    return host


def _rel(path: str) -> str:
    parts = path.lstrip("/").split("/")
    if not path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreError(f"refusing node path {path!r}")
    return "/".join(parts)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _mkdirs(base: Path, rel_dir: Path) -> None:
    """Create ``base/rel_dir`` one level at a time, each new level 0700."""
    cur = base
    for part in rel_dir.parts:
        cur = cur / part
        try:
            os.mkdir(cur, 0o700)
            os.chmod(cur, 0o700)  # the umask may have removed bits; we want exactly 0700
        except FileExistsError:
            pass


def _write(base: Path, rel: str, content: bytes, mode: int) -> bool:
    """Atomically write ``base/rel`` with ``mode`` unless it already has these bytes and mode."""
    target = base / rel
    try:
        st = target.stat()
        if (st.st_mode & 0o777) == mode and target.read_bytes() == content:
            return False
    except FileNotFoundError:
        _mkdirs(base, Path(rel).parent)
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, content)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return True


def _prune(base: Path, rel: str) -> None:
    """Delete ``base/rel`` and the directories it leaves empty, up to ``base``."""
    (base / rel).unlink(missing_ok=True)
    parent = (base / rel).parent
    while parent != base and parent.is_relative_to(base):
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


class DirStore:
    """A PkiStore over a directory (one cluster per directory)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.meta = self.root / ".bke"
        self.manifest_path = self.meta / "manifest.json"
        self.store_dir = self.meta / "store"

    # -- reading ----------------------------------------------------------------------------------

    def manifest(self) -> Manifest | None:
        raw = _read(self.manifest_path)
        return None if raw is None else Manifest.from_json(raw)

    def _version(self) -> str | None:
        try:
            st = self.manifest_path.stat()
        except FileNotFoundError:
            return None
        return f"{st.st_mtime_ns}:{st.st_size}"

    def check_target(self) -> None:
        """Refuse a non-empty directory that is not a BKE PKI directory (a mistyped --out)."""
        if self.manifest_path.exists() or not self.root.exists():
            return
        foreign = sorted(p.name for p in self.root.iterdir() if p.name != ".bke")
        if foreign:
            raise StoreError(f"{self.root} is not empty ({', '.join(foreign[:3])}...) and holds no BKE PKI "
                             f"(.bke/manifest.json); choose an empty or new directory")

    async def load(self, cluster: str, box: SecretBox | None,
                   ids: Collection[str] | None = None) -> Snapshot | None:
        version = self._version()
        manifest = self.manifest()
        if manifest is None:
            return None
        if manifest.cluster != cluster:
            raise StoreError(f"{self.root} holds the PKI of cluster {manifest.cluster!r}, not {cluster!r}")
        refs = manifest.refs_by_instance()
        materials: dict[str, Material] = {}
        for iid in (manifest.entries if ids is None else ids):
            m = self._load_one(manifest.cluster, iid, refs.get(iid, []), box)
            if m is not None:
                materials[iid] = m
        return Snapshot(manifest, materials, version)

    def _load_one(self, cluster: str, iid: str, refs: list, box: SecretBox | None) -> Material | None:
        cert = key = None
        for host, ref in refs:
            need_cert, need_key = cert is None, key is None and box is not None
            if not need_cert and not need_key:
                break
            if not ((need_cert and ref.part in _CERT_PARTS) or (need_key and ref.part in _KEY_PARTS)):
                continue
            data = _read(self.root / _check_host(host) / _rel(ref.path))
            if data is None:
                continue
            if ref.part == "kubeconfig":
                m = embedded_material(data)
                if m is not None:
                    cert, key = cert or m.cert, key or m.key
            elif ref.part in _CERT_PARTS and cert is None:
                cert = data
            elif ref.part == "key" and key is None:
                key = data
        if cert is None:
            cert = _read(self.store_dir / f"{iid}.crt")
        if key is None and box is not None:
            blob = _read(self.store_dir / f"{iid}.key.enc")
            if blob is not None:
                try:
                    key = box.decrypt(blob, key_aad(cluster, iid))
                except DecryptError as exc:
                    raise StoreError(f"{self.store_dir / (iid + '.key.enc')}: {exc}") from None
        if cert is None:
            return None
        return Material(cert, key if box is not None else None)

    # -- writing ----------------------------------------------------------------------------------

    async def save(self, snapshot: Snapshot, changed: Collection[str], box: SecretBox,
                   expected_version: str | None) -> None:
        self.check_target()
        if self._version() != expected_version:
            raise StoreConflict(f"{self.manifest_path} changed while this run was working; run again")
        new = snapshot.manifest
        old = self.manifest()
        hosts = [_check_host(h) for h in new.files]
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        _mkdirs(self.root, Path(".bke/store"))
        for host in hosts:  # 1. node trees
            for ref in new.files[host]:
                _write(self.root, f"{host}/{_rel(ref.path)}", render_file(ref, snapshot.materials, new.entries, new.cluster), ref.mode)
        if old is not None:  # 2. files the new plan no longer gives a node
            keep = {(h, r.path) for h, refs in new.files.items() for r in refs}
            for host, refs in old.files.items():
                for ref in refs:
                    if (host, ref.path) not in keep:
                        _prune(self.root, f"{_check_host(host)}/{_rel(ref.path)}")
        self._save_unplaced(new, snapshot.materials, set(changed), box)  # 3. DIR/.bke/store
        raw = new.to_json()
        if _read(self.manifest_path) != raw:  # 4. the manifest, last: it commits the run
            _write(self.meta, "manifest.json", raw, 0o600)

    def _save_unplaced(self, manifest: Manifest, materials: Mapping[str, Material], changed: set[str],
                       box: SecretBox) -> None:
        """Material no node holds (e.g. the etcd CA key) lives in .bke/store, keys encrypted."""
        on_node = manifest.refs_by_instance()
        wanted: set[str] = set()
        for iid, m in materials.items():
            parts = {ref.part for _, ref in on_node.get(iid, [])}
            if not parts & set(_CERT_PARTS):
                wanted.add(f"{iid}.crt")
                _write(self.store_dir, f"{iid}.crt", m.cert, 0o644)
            if m.key is not None and not parts & set(_KEY_PARTS):
                name = f"{iid}.key.enc"
                wanted.add(name)
                if iid in changed or not (self.store_dir / name).exists():
                    _write(self.store_dir, name, box.encrypt(m.key, key_aad(manifest.cluster, iid)), 0o600)
        for stale in self.store_dir.iterdir():
            if stale.name not in wanted:
                stale.unlink()
