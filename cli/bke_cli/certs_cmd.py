"""`bke certs ...`: issue offline into a directory, list node files, check expiration, renew.

    bke certs issue SPEC --out DIR
    bke certs files SPEC
    bke certs check-expiration (--dir DIR | --cluster NAME (--workdir DIR | --redis URL))
    bke certs renew [all|NAME[,NAME...]] [--within-days N] --dir DIR
    bke certs renew [all|NAME[,NAME...]] [--within-days N] --cluster NAME (--workdir DIR | --nats URL)
    bke certs kubeconfig [super-admin.conf] --out FILE (--dir DIR | --cluster NAME (--workdir DIR | --redis URL))

Offline (`--dir`), the work is bke.core.pki.operations (the same code the certs service runs); this
module only reads options, picks the store, injects "now", and prints. With `--cluster`, renew
goes through the certs service on the bus and follows the rotation onto the nodes
(`rotate_follow`). Exit codes: 0 ok, 2 invalid input or refused (unknown certificate, CA
renewal, bad key file, foreign directory), 1 operational failure (also a refused or failed
rotation).
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Optional, TypeVar

import typer
from rich.console import Console

from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.expiration import EXPIRATION_GET, GetExpiration, parse_expiration_reply
from bke.contracts.status import StatusError
from bke.core.errors import TemporaryError
from bke.adapters.pki.store_dir import DirStore
from bke.core.pki import IssueOptions, PkiError, PkiNotReady, PkiStore, node_file_refs
from bke.core.pki.expiry import ExpiryRow
from bke.adapters.auth.authority import write_private
from bke.core.pki.operations import check_expiration, cluster_kubeconfig, ensure_cluster_pki, renew_certs
from bke.adapters.pki.store_redis import RedisPkiStore
from bke.adapters.state.client import redis_client
from bke.core.secrets import SECRET_KEY_ENV, SecretBox, SecretKeyError, box_for, create_key_file, key_file_env, load_secret_box


from .connect import resolve_nats
from .output import EXIT_FAILURE, EXIT_INVALID, die, warn_lines
from .rotate_follow import renew_and_follow
from .spec_input import plan_or_exit
from .state_cmd import resolve_store

__all__ = ["register"]

T = TypeVar("T")
certs = typer.Typer(no_args_is_help=True, help="Certificates: issue, list node files, check expiration, renew.")


def register(app: typer.Typer) -> None:
    app.add_typer(certs, name="certs")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _run(make: Callable[[], Awaitable[T]]) -> T:
    """Run one async operation; map our typed errors to exit codes and ERROR lines."""
    try:
        return asyncio.run(make())  # type: ignore[arg-type]
    except (PkiError, SecretKeyError, PkiNotReady) as exc:
        die(str(exc), EXIT_INVALID)
    except TemporaryError as exc:
        die(f"{exc} (temporary: run the command again)", EXIT_FAILURE)
    except (OSError, ConnectionError) as exc:
        die(f"{type(exc).__name__}: {exc}", EXIT_FAILURE)


def _dir_box(out: Path, create: bool) -> SecretBox:
    """The `pki` key: BKE_KEY_FILE_PKI or BKE_SECRET_KEY_FILE if set (bke.core.secrets.key_kinds), else
    DIR/.bke/secret.key (created by `issue` if absent)."""
    own = key_file_env("pki")
    try:
        if os.environ.get(own, "").strip() or os.environ.get(SECRET_KEY_ENV, "").strip():
            return box_for("pki")
        path = out / ".bke" / "secret.key"
        if path.exists() or not create:
            return load_secret_box(path)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        box = create_key_file(path)
    except SecretKeyError as exc:
        die(f"{exc} (set {own} to the key file that encrypted {out}/.bke)", EXIT_INVALID)
    warn_lines([f"{own} is not set: created the at-rest key {path} (0600). Anyone who can read "
                f"{out} can now decrypt the CA keys in {out}/.bke: move the key elsewhere and set "
                f"{own} to it."])
    return box


@certs.command("issue")
def issue_cmd(
    spec: Path = typer.Argument(..., help="multi-document YAML: one BKECluster + BKENodes"),
    out: Path = typer.Option(..., "--out", help="folder for DIR/<hostname>/<node paths> and DIR/.bke"),
    procs: int = typer.Option(os.cpu_count() or 1, "--procs", min=1, help="processes for key generation"),
) -> None:
    """Issue (or complete, reusing what is valid) the cluster's PKI into node trees under --out."""
    plan = plan_or_exit(spec)
    store = DirStore(out)
    try:
        store.check_target()
    except PkiError as exc:
        die(str(exc), EXIT_INVALID)
    box = _dir_box(out, create=True)
    options = IssueOptions(procs=procs, start_method="fork")
    report = _run(lambda: ensure_cluster_pki(plan, store, _now(), box, options))
    print(f"cluster {report.cluster}: {len(report.issued)} issued, {len(report.reissued)} reissued, "
          f"{len(report.reused)} reused, {len(report.removed)} removed; files for {len(report.nodes)} nodes in {out}")
    for r in report.reissued:
        print(f"reissued {r.instance}: {r.reason}")
    warn_lines(report.warnings)


@certs.command("files")
def files_cmd(spec: Path = typer.Argument(..., help="multi-document YAML: one BKECluster + BKENodes")) -> None:
    """Print every node's files (path, mode, certificate) as the certificate table places them."""
    plan = plan_or_exit(spec)
    for host, refs in node_file_refs(plan).items():
        for ref in refs:
            print(f"{host}\t{ref.mode:04o}\t{ref.path}\t{ref.instance}")


def _dir_store(directory: Path, use: Callable[[PkiStore, str], Awaitable[T]]) -> T:
    """Run ``use(store, cluster)`` against a folder written by `bke certs issue` (the cluster
    services' store is theirs: the CLI asks them over the bus instead)."""
    store = DirStore(directory)
    manifest = store.manifest() if directory.exists() else None
    if manifest is None:
        die(f"{directory}: no BKE PKI here (.bke/manifest.json missing)", EXIT_INVALID)
    name = manifest.cluster
    return _run(lambda: use(store, name))


def _residual(delta: timedelta) -> str:
    if delta.total_seconds() <= 0:
        return "expired"
    return f"{delta.days // 365}y" if delta.days >= 365 else f"{delta.days}d" if delta.days else "<1d"


def _nodes(nodes: tuple[str, ...]) -> str:
    return ",".join(nodes[:3]) + (f" +{len(nodes) - 3}" if len(nodes) > 3 else "") if nodes else "-"


def _print_rows(title: str, rows: list[ExpiryRow], with_ca: bool) -> None:
    head = [title, "EXPIRES", "RESIDUAL TIME"] + (["CERTIFICATE AUTHORITY"] if with_ca else []) + ["NODES"]
    table = [head] + [[r.instance, r.not_after.strftime("%b %d, %Y %H:%M UTC"), _residual(r.residual)]
                      + ([r.ca or "-"] if with_ca else []) + [_nodes(r.nodes)] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        print("   ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())


async def expiration_over_bus(nats_url: BusAccess | str, cluster: str, timeout: float = 10.0) -> list[ExpiryRow]:
    """Every page of the certs service's answer, as rows; exits 2 for an unknown cluster."""
    from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

    nc = await connect_nats(nats_url)
    rows: list[ExpiryRow] = []
    try:
        offset: int | None = 0
        while offset is not None:
            try:
                msg = await nc.request(EXPIRATION_GET, GetExpiration(cluster=cluster, offset=offset).to_bytes(), timeout=timeout)
            except (NoRespondersError, NatsTimeout):
                die(f"no certs service answers on {EXPIRATION_GET}; is it running?", EXIT_FAILURE)
            reply = parse_expiration_reply(msg.data)
            if isinstance(reply, StatusError):
                die(f"cluster {cluster!r}: {reply.message}", EXIT_INVALID if reply.reason != "Unavailable" else EXIT_FAILURE)
            rows += [ExpiryRow(instance=r.instance, name=r.name, owner=None, is_ca=r.is_ca,
                               not_after=datetime.fromisoformat(r.not_after), residual=timedelta(seconds=r.residual_s),
                               ca=r.ca, nodes=tuple(r.nodes)) for r in reply.rows]
            offset = reply.next_offset
    finally:
        await nc.close()
    return rows


def _services_nats(workdir: Optional[Path], nats_url: Optional[str]) -> BusAccess:
    """The NATS of the services that run --cluster: a lab's (its operator identity), or the one
    given (with BKE_NATS_CREDS / BKE_NATS_INBOX_PREFIX / BKE_NATS_TLS_CA)."""
    if workdir is None and not nats_url:
        die("--cluster needs --workdir DIR (a lab) or --nats URL (or BKE_NATS_URL)", EXIT_INVALID)
    return resolve_nats(workdir, nats_url)


@certs.command("check-expiration")
def check_expiration_cmd(
    directory: Optional[Path] = typer.Option(None, "--dir", help="a folder written by `bke certs issue`"),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="a cluster run by the BKE services"),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="with --cluster: a lab's folder (its NATS)"),
    nats_url: Optional[str] = typer.Option(None, "--nats", envvar="BKE_NATS_URL", help="with --cluster: NATS URL"),
) -> None:
    """Per certificate: expiry, residual time, CA and nodes (no secret key needed). With
    --cluster, the certs service answers over the bus."""
    if (directory is None) == (cluster is None):
        die("give exactly one of --dir DIR and --cluster NAME", EXIT_INVALID)
    if cluster is not None:
        url = _services_nats(workdir, nats_url)
        rows = _run(lambda: expiration_over_bus(url, cluster))
    else:
        assert directory is not None
        now = _now()
        rows = _dir_store(directory, lambda store, name: check_expiration(name, store, now))
    _print_rows("CERTIFICATE", [r for r in rows if not r.is_ca], True)
    print()
    _print_rows("CERTIFICATE AUTHORITY", [r for r in rows if r.is_ca], False)


@certs.command("renew")
def renew_cmd(
    target: Optional[str] = typer.Argument(None, help="`all`, a certificate name (apiserver), an instance "
                                           "(apiserver@m1), or several, comma-separated"),
    within_days: Optional[float] = typer.Option(None, "--within-days", min=0.001, max=3650,
                                                help="instead of names: every leaf expiring within N days"),
    directory: Optional[Path] = typer.Option(None, "--dir", help="a folder written by `bke certs issue`"),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="a cluster run by the BKE services"),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="with --cluster: a lab's folder (its NATS)"),
    nats_url: Optional[str] = typer.Option(None, "--nats", envvar="BKE_NATS_URL", help="with --cluster: NATS URL"),
    timeout: float = typer.Option(1800.0, "--timeout", help="with --cluster: seconds to follow the rotation"),
) -> None:
    """Renew leaf certificates (new key and serial, same subject and SANs); CAs are never
    renewed here. With --cluster, the certs service renews and the dispatcher delivers the new
    files to the nodes that hold them, one node at a time, and makes each component use them."""
    names = [n.strip() for n in (target or "").split(",") if n.strip()]
    if bool(names) == (within_days is not None):
        die("give exactly one of NAME (or all) and --within-days N", EXIT_INVALID)
    if (directory is None) == (cluster is None):
        die("give exactly one of --dir DIR and --cluster NAME", EXIT_INVALID)
    if cluster is not None:
        url = _services_nats(workdir, nats_url)
        raise typer.Exit(asyncio.run(renew_and_follow(url, cluster, names, within_days, timeout, Console())))
    now = _now()
    threshold = timedelta(days=within_days) if within_days is not None else None

    async def renew(store: PkiStore, name: str):  # type: ignore[no-untyped-def]
        return await renew_certs(name, store, now, _dir_box(directory, create=False), names=names or None,
                                 threshold=threshold, options=IssueOptions(start_method="fork"))

    assert directory is not None
    renewed = _dir_store(directory, renew)
    nodes: dict[str, None] = {}
    for r in renewed:
        print(f"renewed {r.instance}: expires {r.not_after:%b %d, %Y %H:%M UTC}")
        nodes.update(dict.fromkeys(r.nodes))
    if nodes:
        print(f"deliver the new files to: {', '.join(nodes)} (and restart the components using them)")


@certs.command("kubeconfig")
def kubeconfig_cmd(
    name: str = typer.Argument("super-admin.conf", help="a kubeconfig kept on no node (super-admin.conf)"),
    out: Path = typer.Option(..., "--out", help="file to write, mode 0600 (never printed)"),
    directory: Optional[Path] = typer.Option(None, "--dir", help="a folder written by `bke certs issue`"),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="a cluster run by the BKE services"),
    workdir: Optional[Path] = typer.Option(None, "--workdir", help="with --cluster: a lab's folder"),
    redis_url: Optional[str] = typer.Option(None, "--redis", help="with --cluster: the state's Redis (admin user)"),
) -> None:
    """Break-glass: write super-admin.conf (group system:masters, which bypasses RBAC) to --out.

    BKE keeps it on no node: it lives encrypted in the PKI store. With --cluster this reads the
    store like `bke state` does (the state's admin identity and the `pki` key), because a
    private key never travels on the bus. Keep the file offline and delete it after use; the
    only way to revoke it is a new cluster CA."""
    if (directory is None) == (cluster is None):
        die("give exactly one of --dir DIR and --cluster NAME", EXIT_INVALID)
    if cluster is not None:
        access, box = resolve_store(workdir, redis_url, "pki")

        async def from_redis() -> bytes:
            r = redis_client(access)
            try:
                return await cluster_kubeconfig(cluster, RedisPkiStore(r), name, box)
            finally:
                await r.aclose()

        data = _run(from_redis)
    else:
        assert directory is not None
        data = _dir_store(directory, lambda store, c: cluster_kubeconfig(c, store, name, _dir_box(directory, create=False)))
    write_private(out, data)
    print(f"wrote {out} (0600): {name} of cluster {cluster or 'in ' + str(directory)}; delete it after use")
