"""`bke identities list|provision|rotate|revoke`: the bus identities (NATS users) BKE issued.

With `--workdir` (a lab): the lab's registry, creds under `<lab>/creds/`, and a revocation or
rotation reaches the running nats-server at once (no reload). For a deployment, `--redis` and
the `authority` at-rest key (BKE_KEY_FILE_AUTHORITY, else BKE_SECRET_KEY_FILE) give the
registry; `provision` writes the creds file to `--out` (0600) for you to ship to the process;
`rotate`/`revoke` push the account update when `--nats` and `--system-creds` (a system-account
user) are given, else they say it is still to be pushed.
"""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Optional

import redis
import typer

from bke.adapters.auth.authority import write_creds
from bke.adapters.auth.permissions import ROLES, SERVICE_ROLES, identity_name, inbox_prefix
from bke.adapters.auth.push import push_account
from bke.adapters.auth.registry import IdentityRecord, IdentityRegistry, UnknownIdentity
from bke.adapters.auth.serve_renewals import serve
from bke.adapters.auth.system_user import SystemUser, ensure_system_user
from bke.adapters.bus.connect import BusAccess
from bke.lab.identities import LabIdentities
from bke.lab.supervisor import LabSupervisor
from bke.adapters.runtime import EmbeddedRuntime
from bke.core.secrets.at_rest import DecryptError, SecretKeyError
from bke.core.secrets.key_kinds import box_for, key_file_env

from .output import EXIT_INVALID, die

__all__ = ["register"]

ids = typer.Typer(no_args_is_help=True, help="Bus identities: one per agent, service, operator CLI and dashboard.")
WORKDIR = typer.Option(None, "--workdir", help="a lab's folder")
REDIS = typer.Option(None, "--redis", envvar="BKE_REDIS_URL", help="without --workdir: the Redis of the deployment")


def _lab(workdir: Path) -> LabIdentities:
    info = EmbeddedRuntime.read_info(workdir.resolve() / "runtime")
    if info is None:
        die(f"{workdir}: no running lab here (no runtime/runtime.json)", EXIT_INVALID)
    sup = LabSupervisor(workdir)
    keeper = sup.identities(sup.runtime.ensure_started())
    if keeper is None:
        die(f"{workdir}: this lab's NATS runs without authentication", EXIT_INVALID)
    return keeper


def _registry(redis_url: Optional[str]) -> IdentityRegistry:
    if not redis_url:
        die("say where the registry is: --workdir DIR (a lab) or --redis URL (or BKE_REDIS_URL)", EXIT_INVALID)
    try:
        box = box_for("authority")
    except SecretKeyError as exc:
        die(f"{key_file_env('authority')}: {exc}", EXIT_INVALID)
    registry = IdentityRegistry(redis.Redis.from_url(redis_url), box, lambda: int(time.time()))
    try:
        registry.load_authority()  # the key must open what is stored: say so now, not mid-way
    except DecryptError as exc:
        die(f"{key_file_env('authority')}: cannot open the stored NATS authority: {exc}", EXIT_INVALID)
    except redis.RedisError as exc:
        die(f"cannot reach Redis at --redis: {exc}")
    return registry


def _row(r: IdentityRecord) -> str:
    state = "active" if r.active else f"revoked@{r.revoked_at}"
    expires = f"expires@{r.expires_at}" if r.expires_at else "no expiry"
    return f"{r.name:<40} {r.role:<10} {r.public[:12]}…  issued@{r.issued_at}  {expires}  {state}"


@ids.command("list")
def list_cmd(workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS,
             role: Optional[str] = typer.Option(None, "--role"), cluster: Optional[str] = typer.Option(None, "--cluster"),
             output: str = typer.Option("text", "-o", help="text or json")) -> None:
    """Every identity issued: name, role, public key, when issued, when it expires, whether revoked."""
    registry = _lab(workdir).registry if workdir else _registry(redis_url)
    rows = registry.list(role=role, cluster=cluster)
    if output == "json":
        print(json.dumps([json.loads(r.to_json()) for r in rows], indent=2))
        return
    for r in rows:
        print(_row(r))


@ids.command("provision")
def provision_cmd(role: str = typer.Argument(..., help=f"one of {', '.join(ROLES)}"),
                  cluster: Optional[str] = typer.Option(None, "--cluster", help="agent: its cluster"),
                  node: Optional[str] = typer.Option(None, "--node", help="agent: its hostname"),
                  workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS,
                  out: Optional[Path] = typer.Option(None, "--out", help="without --workdir: where to write the creds file")) -> None:
    """Issue an identity (a lab keeps a live one; elsewhere a new key each time) and write its creds file (0600)."""
    if role not in ROLES:
        die(f"role: {role!r} is not one of {', '.join(ROLES)}", EXIT_INVALID)
    try:
        name = identity_name(role, cluster, node)
    except ValueError as exc:
        die(str(exc), EXIT_INVALID)
    if workdir:
        print(f"{name}: {_lab(workdir).ensure(role, cluster, node)}")
        return
    if out is None:
        die("--out FILE: where to write the creds file", EXIT_INVALID)
    user = _registry(redis_url).issue(role, cluster, node)
    write_creds(out, user.creds)
    print(f"{name}: {out} ({user.public})")


def _push_or_say(registry: IdentityRegistry, nats_url: Optional[str], system_creds: Optional[Path]) -> None:
    if not (nats_url and system_creds):
        print("the account update is not pushed yet: run again with --nats URL --system-creds FILE")
        return
    authority = registry.load_authority()
    assert authority is not None
    asyncio.run(push_account(nats_url, system_creds, authority, iat=int(time.time())))


NATS = typer.Option(None, "--nats", envvar="BKE_NATS_URL")
SYS_CREDS = typer.Option(None, "--system-creds", help="a system-account user's creds (pushes the account update)")


@ids.command("rotate")
def rotate_cmd(name: str, workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS,
               out: Optional[Path] = typer.Option(None, "--out"), nats_url: Optional[str] = NATS,
               system_creds: Optional[Path] = SYS_CREDS) -> None:
    """A new key for NAME; the old one is revoked (its live connections are cut)."""
    try:
        if workdir:
            print(f"{name}: {_lab(workdir).rotate(name)}")
            return
        registry = _registry(redis_url)
        record = registry.get(name)
        if record is None:
            raise UnknownIdentity(name)
        if out is None:
            die("--out FILE: where to write the new creds file", EXIT_INVALID)
        write_creds(out, registry.issue(record.role, record.cluster, record.node).creds)
        _push_or_say(registry, nats_url, system_creds)
    except (KeyError, UnknownIdentity):
        die(f"identity {name!r}: never issued", EXIT_INVALID)


@ids.command("renew")
def renew_cmd(out: Path = typer.Option(..., "--out", help="folder for creds/<name>.creds of each renewed identity"),
              redis_url: Optional[str] = REDIS,
              role: list[str] = typer.Option([], "--role", help="only these roles (repeatable); agents ask for "
                                             "their own renewal (`bke identities serve-renewals` answers)")) -> None:
    """Every live identity in the last third of its lifetime gets a new creds file; the old one
    is not revoked and serves until it expires (so a running process is not cut off). Install
    the new files (the Secrets, compose's creds) and restart the processes before then."""
    registry = _registry(redis_url)
    roles = tuple(role) or tuple(r for r in ROLES if r != "agent")
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        die(f"--role: {', '.join(unknown)} not one of {', '.join(ROLES)}", EXIT_INVALID)
    due = registry.due(roles=roles)
    for record in due:
        path = write_creds(out / "creds" / f"{record.name}.creds", registry.renew(record.name).creds)
        print(f"{record.name}: {path}")
    if not due:
        print("nothing to renew: every identity has more than a third of its lifetime left")


@ids.command("revoke")
def revoke_cmd(name: Optional[str] = typer.Argument(None), cluster: Optional[str] = typer.Option(None, "--cluster",
               help="instead of NAME: every live identity of this cluster's nodes (the cluster goes)"),
               workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS, nats_url: Optional[str] = NATS,
               system_creds: Optional[Path] = SYS_CREDS) -> None:
    """Revoke NAME (a node goes) or every agent of --cluster; live connections are cut."""
    if (name is None) == (cluster is None):
        die("give exactly one of NAME and --cluster", EXIT_INVALID)
    try:
        if workdir:
            keeper = _lab(workdir)
            names = [name] if name else [r.name for r in keeper.registry.list(cluster=cluster) if r.active]
            for n in names:
                print(_row(keeper.revoke(n)))
            return
        registry = _registry(redis_url)
        done = [registry.revoke(name)] if name else registry.revoke_cluster(cluster or "")
        for r in done:
            print(_row(r))
        _push_or_say(registry, nats_url, system_creds)
    except (KeyError, UnknownIdentity):
        die(f"identity {name!r}: never issued", EXIT_INVALID)


@ids.command("init")
def init_cmd(out: Path = typer.Option(..., "--out", help="folder for auth.conf (included by nats.conf), sys.creds "
                                      "and creds/<name>.creds of each service, the operator, the dashboard, the deploy step "
                                      "(streams) and the agents' renewer"),
             redis_url: Optional[str] = REDIS) -> None:
    """A deployment's NATS trust chain: the operator and accounts (kept, encrypted, in Redis: made
    once), the operator-mode part of nats.conf, the system user (sys.creds: kept while it is this
    authority's and good, else replaced and the old one revoked: bke.adapters.auth.system_user), and one
    identity per service, the operator CLI and the dashboard (issued anew each run, so that a run
    also rotates them)."""
    registry = _registry(redis_url)
    authority = registry.ensure_authority()
    now = int(time.time())
    out.mkdir(parents=True, exist_ok=True)
    system = ensure_system_user(authority, out / "sys.creds", now)
    if system.revocations_changed:
        stored = registry.load_authority()  # the latest (a revocation since is kept: merged)
        assert stored is not None
        stored.merge_revocations(authority)
        registry.save_authority(stored)
        authority = stored
    # The server runs in its container with its resolver directory at /data/jwt (deploy/nats/nats.conf).
    (out / "auth.conf").write_text(authority.server_conf(now, Path("/data/jwt")))
    for role in (*SERVICE_ROLES, "operator", "dashboard", "streams", "renewer"):
        write_creds(out / "creds" / f"{role}.creds", registry.issue(role).creds)
        print(f"{role}: {out / 'creds' / f'{role}.creds'}")
    print(f"nats-server: {out / 'auth.conf'} (include it), system user {out / 'sys.creds'} ({_system_said(system)})")


@ids.command("serve-renewals")
def serve_renewals_cmd(redis_url: Optional[str] = REDIS, nats_url: Optional[str] = NATS,
                       creds: Path = typer.Option(..., "--creds", envvar="BKE_NATS_CREDS",
                                                  help="the `renewer` identity's creds file "
                                                  "(`bke identities init` writes creds/renewer.creds)"),
                       tls_ca: Optional[Path] = typer.Option(None, "--tls-ca", envvar="BKE_NATS_TLS_CA",
                                                             help="CA bundle of a `tls://` NATS")) -> None:
    """Answer agents' renewal requests until stopped (Ctrl-C): each agent in the last third of
    its JWT's life asks for a new JWT for the key it holds, and gets one unless it is revoked or
    asks for another node or key (bke.adapters.auth.agent_renewal). docker-compose's `renewer`,
    the `bke-renewer` Deployment and the lab run the same loop all the time
    (`python -m bke.adapters.auth.serve_renewals`); by hand, run it where the authority's key is
    for at least an hour in every few months (agents ask again every hour while due). Its Redis
    user needs only the stored authority and the identity registry (`bke-renewer`, renewer.env)."""
    registry = _registry(redis_url)
    if not nats_url:
        die("--nats URL (or BKE_NATS_URL): the NATS the agents reach", EXIT_INVALID)
    access = BusAccess(nats_url, creds, inbox_prefix(identity_name("renewer")), tls_ca)
    try:
        asyncio.run(serve(access, registry, lambda line: print(line, flush=True)))
    except KeyboardInterrupt:
        pass


def _system_said(system: SystemUser) -> str:
    if system.status == "kept":
        return "kept"
    if system.status == "made":
        return "made" if system.found == "missing" else f"made: the one there was {system.found}"
    return (f"replaced: the one there was {system.found}; its key {system.revoked} is revoked in auth.conf, "
            "from the next start of nats-server")


def register(app: typer.Typer) -> None:
    app.add_typer(ids, name="identities")
