"""The lab's bus identities: one creds file per service, per agent and for the operator CLI.

    <lab>/creds/<name>.creds   0600; `name` is bke.adapters.auth.permissions.identity_name

`ensure` is idempotent: a creds file whose key is the registry's live key for that name is kept
(a restarted process keeps its identity); otherwise a new identity is issued (the old key, if
any, is revoked) and the file rewritten. Revoking or rotating pushes the account JWT to the
running nats-server (no reload) and rewrites the runtime's authority file, so that the next
start of the lab's NATS preloads the same revocations.
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


from bke.adapters.auth.jwt import decode_jwt
from bke.adapters.auth.permissions import identity_name, inbox_prefix
from bke.adapters.auth.push import push_account
from bke.adapters.auth.authority import write_creds
from bke.adapters.auth.registry import IdentityRecord, IdentityRegistry
from bke.adapters.runtime import EmbeddedRuntime, RuntimeInfo
from bke.adapters.runtime.nats_security import load_runtime_authority, save_runtime_authority
from bke.adapters.state.client import sync_redis_client
from bke.core.secrets.at_rest import load_secret_box

__all__ = ["LabIdentities", "creds_path"]


def creds_path(workdir: Path, name: str) -> Path:
    return workdir / "creds" / f"{name}.creds"


def _creds_public(path: Path) -> str | None:
    try:
        lines = path.read_text().splitlines()
        token = lines[lines.index("-----BEGIN NATS USER JWT-----") + 1]
        return str(decode_jwt(token, verify=False)["sub"])
    except (OSError, ValueError, IndexError, KeyError):
        return None


@dataclass
class LabIdentities:
    workdir: Path
    runtime: EmbeddedRuntime
    info: RuntimeInfo
    clock: Callable[[], int] = lambda: int(time.time())

    def __post_init__(self) -> None:
        auth = self.runtime.nats_auth
        if auth is None:
            raise RuntimeError("the lab's NATS runs without authentication: no identities to keep")
        self.auth = auth
        self.client = sync_redis_client(self.info.admin_store())  # through Sentinel if the lab has one
        self.registry = IdentityRegistry(self.client, load_secret_box(auth.key_file), self.clock)
        stored = self.registry.load_authority()
        if stored is None or stored.account.public != auth.authority.account.public:
            # The runtime's file made this NATS; Redis keeps a copy for `bke state backup`.
            self.registry.save_authority(auth.authority)
        elif stored.merge_revocations(auth.authority):
            # what the runtime revoked at its start (a replaced system user) is kept in the copy:
            # the next push writes the copy back to the file (_publish_revocations)
            self.registry.save_authority(stored)

    def close(self) -> None:
        self.client.close()

    def env(self, role: str, cluster: str | None = None, node: str | None = None) -> dict[str, str]:
        """BKE_NATS_CREDS / BKE_NATS_INBOX_PREFIX (/ BKE_NATS_TLS_CA) for one process."""
        path = self.ensure(role, cluster, node)
        name = identity_name(role, cluster, node)
        env = {"BKE_NATS_CREDS": str(path), "BKE_NATS_INBOX_PREFIX": inbox_prefix(name)}
        if self.info.nats_tls_ca:
            env["BKE_NATS_TLS_CA"] = self.info.nats_tls_ca
        return env

    def ensure(self, role: str, cluster: str | None = None, node: str | None = None) -> Path:
        name = identity_name(role, cluster, node)
        path = creds_path(self.workdir, name)
        record = self.registry.get(name)
        if record is not None and record.active and _creds_public(path) == record.public:
            if not record.due(self.clock()):
                return path
            # in the last third of its life: a new one, the old left to expire (a running
            # process keeps its connection until then)
            return write_creds(path, self.registry.renew(name).creds)
        user = self.registry.issue(role, cluster, node)
        write_creds(path, user.creds)
        if record is not None and record.active:  # the old key was revoked by issue()
            self._publish_revocations()
        return path

    def rotate(self, name: str) -> Path:
        record = self._record(name)
        user = self.registry.issue(record.role, record.cluster, record.node)
        path = write_creds(creds_path(self.workdir, name), user.creds)
        self._publish_revocations()
        return path

    def revoke(self, name: str) -> IdentityRecord:
        self._record(name)
        revoked = self.registry.revoke(name)
        creds_path(self.workdir, name).unlink(missing_ok=True)
        self._publish_revocations()
        return revoked

    def _record(self, name: str) -> IdentityRecord:
        record = self.registry.get(name)
        if record is None:
            raise KeyError(f"identity {name!r}: never issued in this lab")
        return record

    def _publish_revocations(self) -> None:
        authority = self.registry.load_authority()
        assert authority is not None
        if authority.merge_revocations(load_runtime_authority(self.auth.authority_file, self.auth.key_file)):
            self.registry.save_authority(authority)  # the runtime revoked something since (its system users)
        save_runtime_authority(self.auth.authority_file, self.auth.key_file, authority)
        push = push_account(self.info.nats_url, self.auth.system_creds, authority, iat=self.clock(),
                            tls_ca=Path(self.info.nats_tls_ca) if self.info.nats_tls_ca else None)
        # A thread of its own: callers are synchronous (CLI, supervisor) but may sit under an
        # event loop (the e2e tests), where asyncio.run is refused.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, push).result()
