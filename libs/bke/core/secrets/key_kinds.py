"""At-rest keys with one job each, and which process is given which.

Why: one key for everything meant that every process holding it (five services, the CLI, the
lab) could decrypt every secret BKE stores, given a copy of Redis or of a backup, and that no
key could be replaced without replacing all of them. Each kind below encrypts one family of
secrets and is given only to the processes that use it, so a leaked file opens that family
alone, and each is rotated on its own (`bke keys`, bke.adapters.state.rekey).

    kind       encrypts                                               given to
    pki        CA and leaf private keys (bke:<c>:pki:keys;             certs; `bke certs issue`
               DIR/.bke of `bke certs issue`)
    api        admin.conf, super-admin.conf (bke:<c>:api-credentials)  certs (writes), dispatcher,
                                                                       upgrader (read)
    signing    the command-signing key (bke:command-signing-key)      dispatcher, upgrader
    snapshot   the etcd snapshot key (bke:etcd-snapshot-key)          upgrader (restores);
                                                                       `bke state init`, `bke etcd`
    authority  the NATS operator's and account's seeds                 `bke identities`, the lab,
               (bke:auth:authority; a lab's runtime/auth/authority.enc)  the agents' renewer
                                                                       (and `bke state restore`)
    backup     `bke state backup` files                                `bke state backup/restore`
    plan       the plan-signing key (bke:plan-signing-key)             planner, upgrader; `bke state init`
    render     the render-signing key (bke:render-signing-key)         renderer; `bke state init`

`api` is a kind of its own, and not `pki`, so that the dispatcher and the upgrader, who need
admin.conf, hold nothing that opens a CA key. The dispatcher holds no `snapshot` key: it asks
agents for snapshots sealed to the key's public half, which the stored record carries in clear
(bke.core.secrets.snapshot_key). `plan` and `render` are kinds of their own so that the key that
signs plans or rendered files (bke.core.secrets.record_signing) opens in their writers' hands
only: the readers check with the public halves, in clear in the same records.

Where a process finds a kind's key file: `BKE_KEY_FILE_<KIND>` (e.g. BKE_KEY_FILE_PKI), else
`BKE_SECRET_KEY_FILE`, the one file of a single-key deployment. That fallback keeps such a
deployment working as it did, and it is the less safe shape: its one file opens every kind, and
it is given to every process that needs any. `bke keys rotate` never rewrites it (the other
kinds still use it); a kind leaves it by being given a file of its own (docs/keys.md).

A running service reads its files again when they change (`KeyringFile`: a `stat` per use, the
file read only when its inode, size or modification time moved), so a rotated keyring reaches it
without a restart wherever the file is replaced in place (the lab; a Kubernetes Secret volume).
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .at_rest import SECRET_KEY_ENV, SecretBox, SecretKeyError, SecretKeyMissing, load_keyring

__all__ = [
    "KINDS",
    "KIND_NAMES",
    "SERVICE_KEY_KINDS",
    "KeyKind",
    "KeyringFile",
    "box_for",
    "key_file_env",
    "key_file_for",
    "keyring_for",
]


@dataclass(frozen=True)
class KeyKind:
    name: str
    encrypts: str
    services: tuple[str, ...]  # the services given its file (the CLI's commands are in the docstring)


KINDS: tuple[KeyKind, ...] = (
    KeyKind("pki", "CA and leaf private keys", ("certs",)),
    KeyKind("api", "the kubeconfigs of BKE's Kubernetes API work", ("certs", "dispatcher", "upgrader")),
    KeyKind("signing", "the command-signing key", ("dispatcher",)),
    KeyKind("snapshot", "the etcd snapshot key", ("upgrader",)),
    KeyKind("authority", "the NATS operator's and account's seeds", ()),
    KeyKind("backup", "state backups", ()),
    KeyKind("plan", "the plan-signing key", ("planner", "upgrader")),
    KeyKind("render", "the render-signing key", ("renderer",)),
)
KIND_NAMES: tuple[str, ...] = tuple(k.name for k in KINDS)
# service -> the kinds whose files it is given (the lab, docker-compose.yml, deploy/kubernetes)
SERVICE_KEY_KINDS: dict[str, tuple[str, ...]] = {
    svc: tuple(k.name for k in KINDS if svc in k.services) for svc in sorted({s for k in KINDS for s in k.services})}


def key_file_env(kind: str) -> str:
    """The variable naming `kind`'s own key file."""
    if kind not in KIND_NAMES:
        raise ValueError(f"unknown key kind {kind!r} (one of {', '.join(KIND_NAMES)})")
    return f"BKE_KEY_FILE_{kind.upper()}"


def key_file_for(kind: str, environ: Mapping[str, str] | None = None) -> Path:
    """`kind`'s key file: its own variable, else the shared BKE_SECRET_KEY_FILE (the one place
    these variables are read)."""
    env = os.environ if environ is None else environ
    own = key_file_env(kind)
    path = env.get(own, "").strip() or env.get(SECRET_KEY_ENV, "").strip()
    if not path:
        raise SecretKeyMissing(f"neither {own} nor {SECRET_KEY_ENV} is set; one must name the file of the "
                               f"'{kind}' at-rest key")
    return Path(path)


def box_for(kind: str, environ: Mapping[str, str] | None = None) -> SecretBox:
    """`kind`'s keys, read now (a command's one use)."""
    return load_keyring(key_file_for(kind, environ)).box()


class KeyringFile:
    """A key file a long-running process uses: read at once (a missing or bad file fails at
    start, not at the first message), then again whenever it changes. A changed file that does
    not parse (a person mid-edit) leaves the keys in use as they were, and is tried again at
    the next use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp = self._stat()
        self._box = load_keyring(path).box()

    def _stat(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)  # follows symlinks: a Kubernetes Secret volume swaps its target
        except OSError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def box(self) -> SecretBox:
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            try:
                self._box = load_keyring(self.path).box()
            except SecretKeyError:
                return self._box  # unreadable now: the keys in use, and the file read again next time
            self._stamp = stamp
        return self._box

    def __repr__(self) -> str:
        return f"KeyringFile({self.path}, {self._box!r})"


def keyring_for(kind: str, environ: Mapping[str, str] | None = None) -> KeyringFile:
    """`kind`'s key file for a service: `.box()` at each use gives its current keys."""
    return KeyringFile(key_file_for(kind, environ))
