"""`bke state init`: what a deployment's state must hold before its services start (bke.adapters.state.state_init),
and the command-signing key's fingerprint and public line, the pin of `bke agent bootstrap`;
`bke state backup FILE` / `bke state restore FILE`: save and restore everything BKE needs to go on;
`bke state migrate [NAME]...`: convert stored records to this BKE's form (bke.adapters.state.migrate).

This is the one command that reads and writes Redis itself, because it *is* the state tool.
Every other command asks the services over the bus. It needs the state's admin identity, which
can scan and write every `bke:` key. That is `--workdir` for a lab (the runtime's admin URL and
the lab's `keys/<kind>.key`), or `--redis URL` (or BKE_REDIS_URL, with BKE_REDIS_TLS_CA for
`rediss://`) together with the key files of the kinds each command uses (bke.core.secrets.key_kinds):
`init` the `snapshot` and `signing` keys, `backup` the `backup` key, `restore` the `backup` key
and the `authority` key (to merge the NATS authority's revocations). A backup is encrypted with
the `backup` key: keep that file apart from the backups, a backup opens with it and nothing else.

What a backup holds, its format and the restore rules: bke.adapters.state.backup. A restore keeps the
trust material of the store as it is now (revocations, agent keys provisioned since, signing
keys: bke.adapters.state.restore_trust) unless `--replace-trust` is given, and says which it did. After a
restore the services see their epoch again (bke.adapters.state.epoch) and go on.
"""
from __future__ import annotations

import asyncio
import os
from datetime import datetime, timezone
from pathlib import Path

import typer
from redis.exceptions import RedisError

from bke.core.errors import PermanentError
from bke.adapters.runtime import EmbeddedRuntime
from bke.lab.key_files import lab_key_file
from bke.core.secrets.at_rest import SecretBox, SecretKeyMissing, load_secret_box
from bke.core.secrets.key_kinds import box_for, key_file_env
from bke.core.secrets.command_key_pin import write_command_key_file
from bke.adapters.state.backup import backup_state, decode_backup, encode_backup, restore_state
from bke.adapters.state.restore_trust import TRUST_ITEMS, TrustDecision
from bke.adapters.state.client import StoreAccess, parse_sentinels, redact_url, redis_client, sync_redis_client
from bke.adapters.state.migrate import MigrationReport, ensure_current, known_clusters
from bke.core.state.schema import RECORDS, UNVERSIONED
from bke.adapters.state.state_init import ensure_state
from bke.core.secrets.record_signing import WRITERS

from .output import EXIT_FAILURE, EXIT_INVALID, die

__all__ = ["key_box", "migrate_lines", "records_lines", "register", "resolve_access", "resolve_store", "trust_lines"]

state_app = typer.Typer(no_args_is_help=True, help="Initialise, back up, restore and convert BKE's state (Redis).")

WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory")
REDIS = typer.Option(None, "--redis", help="Redis URL with the admin user (else BKE_REDIS_URL)")


def resolve_store(workdir: Path | None, redis_url: str | None, kind: str) -> tuple[StoreAccess, SecretBox]:
    """The admin's Redis access and the at-rest key of `kind`, for a lab or a deployment."""
    try:
        if workdir is not None:
            info = EmbeddedRuntime.read_info(workdir.resolve() / "runtime")
            if info is None:
                die(f"{workdir}: no running lab here (no runtime/runtime.json)", EXIT_INVALID)
            return info.admin_store(), load_secret_box(lab_key_file(workdir.resolve(), kind))
        url = redis_url or os.environ.get("BKE_REDIS_URL")
        if not url:
            die("say where the state is: --workdir DIR (a lab), or --redis URL (or BKE_REDIS_URL) "
                f"with {key_file_env(kind)}", EXIT_INVALID)
        return _env_access(url), box_for(kind)
    except PermanentError as exc:
        die(str(exc), EXIT_INVALID)


def key_box(workdir: Path | None, kind: str, required: bool = True) -> SecretBox | None:
    """Another kind's key for the same command (None: not configured, and not `required`)."""
    try:
        return load_secret_box(lab_key_file(workdir.resolve(), kind)) if workdir is not None else box_for(kind)
    except SecretKeyMissing as exc:
        if required:
            die(str(exc), EXIT_INVALID)
        return None
    except PermanentError as exc:
        die(str(exc), EXIT_INVALID)


def resolve_access(workdir: Path | None, redis_url: str | None) -> StoreAccess:
    """The admin's Redis access alone (a conversion reads no secret, so needs no operator key)."""
    if workdir is not None:
        info = EmbeddedRuntime.read_info(workdir.resolve() / "runtime")
        if info is None:
            die(f"{workdir}: no running lab here (no runtime/runtime.json)", EXIT_INVALID)
        return info.admin_store()
    url = redis_url or os.environ.get("BKE_REDIS_URL")
    if not url:
        die("say where the state is: --workdir DIR (a lab), or --redis URL (or BKE_REDIS_URL)", EXIT_INVALID)
    return _env_access(url)


def _env_access(url: str) -> StoreAccess:
    """The URL with BKE_REDIS_TLS_CA and, for Redis behind Sentinel, BKE_REDIS_SENTINELS and
    BKE_REDIS_SENTINEL_MASTER (the services' settings, bke.adapters.settings)."""
    ca = os.environ.get("BKE_REDIS_TLS_CA")
    sentinels, master = os.environ.get("BKE_REDIS_SENTINELS"), os.environ.get("BKE_REDIS_SENTINEL_MASTER")
    try:
        return StoreAccess(url, Path(ca) if ca else None, parse_sentinels(sentinels) if sentinels else (),
                           master or None)
    except ValueError as exc:
        die(f"{exc} (BKE_REDIS_SENTINELS and BKE_REDIS_SENTINEL_MASTER)", EXIT_INVALID)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


@state_app.command("init")
def init(workdir: Path | None = WORKDIR, redis_url: str | None = REDIS,
         command_key_out: Path | None = typer.Option(
             None, "--command-key-out", help="write the command-signing key's public line here (public, 0644): "
             "what `bke agent bootstrap --command-key-file` pins and the agents' BKE_AGENT_COMMAND_KEY")) -> None:
    """Make what the services only read and wait for: the state's epoch, the etcd snapshot key,
    the command-signing key and, given their key files, the plan and render writers' signing keys
    (encrypted with the `snapshot`, `signing`, `plan` and `render` keys); plans and rendered files
    stored before signatures are then signed. Once per deployment, before its services, and after
    an upgrade of BKE; safe to re-run."""
    access, box = resolve_store(workdir, redis_url, "snapshot")
    client = sync_redis_client(access)
    try:
        writers = {w: key_box(workdir, w, required=False) for w in WRITERS}
        done = ensure_state(client, box, signing_box=key_box(workdir, "signing"),
                            record_boxes={w: b for w, b in writers.items() if b is not None})
    except PermanentError as exc:
        die(str(exc), EXIT_INVALID)
    except (RedisError, OSError) as exc:
        die(f"Redis at {redact_url(access.url)}: {type(exc).__name__}: {exc}", EXIT_FAILURE)
    finally:
        client.close()
    typer.echo(f"state of {redact_url(access.url)}: epoch {done.epoch} ({'made now' if done.epoch_made else 'kept'}), "
               f"etcd snapshot key {done.snapshot_key_id} ({'made now' if done.snapshot_key_made else 'kept'})")
    for writer, key_id, made in done.record_keys:
        typer.echo(f"{writer}-signing key {key_id} ({'made now' if made else 'kept'})")
    for writer, count in done.signed_now:
        if count:
            typer.echo(f"signed {count} {writer} record(s) stored before signatures")
    missing = [w for w in WRITERS if w not in {r[0] for r in done.record_keys}]
    if missing:
        typer.echo(f"no key file for {', '.join(missing)} (BKE_KEY_FILE_<KIND>): those writers' signing keys were "
                   "not looked at")
    key = done.command_key
    assert key is not None  # signing_box was given
    typer.echo(f"command-signing key {key.fingerprint} ({'made now' if done.command_key_made else 'kept'}): "
               f"{key.public_line}")
    if command_key_out is not None:
        try:
            write_command_key_file(command_key_out, key)
        except OSError as exc:
            die(f"--command-key-out {command_key_out}: {exc.strerror}", EXIT_FAILURE)
        typer.echo(f"its public line is in {command_key_out}: pin it with `bke agent bootstrap --command-key-file "
                   f"{command_key_out}`")


@state_app.command("backup")
def backup(file: Path = typer.Argument(..., help="the file to write (refused if it exists)"),
           workdir: Path | None = WORKDIR, redis_url: str | None = REDIS) -> None:
    """Write every BKE key, encrypted with the `backup` key, to FILE."""
    access, box = resolve_store(workdir, redis_url, "backup")

    async def run() -> tuple[bytes, object]:
        client = redis_client(access)
        try:
            doc, summary = await backup_state(client, now=_now())
        finally:
            await client.aclose()
        return encode_backup(doc, box), summary

    blob, summary = _run(run(), access)
    try:
        fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        die(f"{file}: exists; choose another name (a backup never overwrites one)", EXIT_INVALID)
    with os.fdopen(fd, "wb") as out:
        out.write(blob)
    typer.echo(f"backed up {summary.keys} keys (epoch {summary.epoch}, digest {summary.digest[:16]}) "  # type: ignore[attr-defined]
               f"to {file}, encrypted with key {box.key_id}")


@state_app.command("restore")
def restore(file: Path = typer.Argument(..., help="a file written by `bke state backup`"),
            workdir: Path | None = WORKDIR, redis_url: str | None = REDIS,
            force: bool = typer.Option(False, "--force", help="replace the BKE keys that exist now"),
            replace_trust: bool = typer.Option(
                False, "--replace-trust", help="take the trust material from the backup too, undoing what changed "
                "since (revocations, agent keys, signing keys); without it: "
                + "; ".join(f"{i.name}: {i.rule}" for i in TRUST_ITEMS))) -> None:
    """Put the state saved in FILE back; the services then go on from it. The trust material is
    kept as it is now unless --replace-trust is given (bke.adapters.state.restore_trust)."""
    access, box = resolve_store(workdir, redis_url, "backup")
    authority = key_box(workdir, "authority", required=False)  # needed to merge two NATS authorities
    try:
        doc = decode_backup(file.read_bytes(), box)
    except OSError as exc:
        die(f"{file}: {exc.strerror}", EXIT_INVALID)
    except PermanentError as exc:
        die(f"{file}: {exc}", EXIT_INVALID)

    async def run() -> object:
        client = redis_client(access)
        try:
            return await restore_state(client, doc, force=force, box=authority, replace_trust=replace_trust)
        finally:
            await client.aclose()

    summary = _run(run(), access)
    typer.echo(f"restored {summary.keys} keys (epoch {summary.epoch}, backup of {summary.created_at}) "  # type: ignore[attr-defined]
               f"into {redact_url(access.url)}")
    for line in trust_lines(summary.trust, replace_trust):  # type: ignore[attr-defined]
        typer.echo(line)


def trust_lines(decisions: list[TrustDecision], replace_trust: bool) -> list[str]:
    """What a restore did with each trust item, and the flag that does otherwise."""
    if replace_trust:
        return [f"trust material replaced with the backup's (--replace-trust): {d.item}; revocations, agent keys "
                "and signing keys changed since the backup are undone" for d in decisions]
    if not decisions:
        return ["no trust material in the backup or the store"]
    return (["trust material kept as it is now (--replace-trust takes the backup's instead):"]
            + [f"  {d.item}: {d.source}: {d.detail}" for d in decisions])


@state_app.command("records")
def records() -> None:
    """What BKE stores per cluster: each record, its keys, where its version is, the version this
    BKE writes, and who writes and reads it (the table of bke.core.state.schema)."""
    for line in records_lines():
        typer.echo(line)


def records_lines() -> list[str]:
    out = []
    for k in RECORDS:
        slot = f"{k.slot.key} {'field' if k.slot.form == 'hash' else 'JSON key'} {k.slot.field}"
        out += [f"{k.name} (version {k.current}; stored before versions: {k.first}; readers read {k.readable_from}..{k.current})",
                f"  {k.summary}",
                "  keys:    " + " ".join(f"bke:<c>:{m}" for m in k.members),
                f"  version: {slot}",
                f"  writer:  {k.writer}",
                f"  reader:  {k.reader}"]
    out.append("outside any cluster's records (no version): " + ", ".join(p for p, _ in UNVERSIONED))
    return out


@state_app.command("migrate")
def migrate(names: list[str] = typer.Argument(None, metavar="[NAME]...", help="clusters (default: every cluster stored)"),
            workdir: Path | None = WORKDIR, redis_url: str | None = REDIS,
            dry_run: bool = typer.Option(False, "--dry-run", help="say what would be converted, write nothing")) -> None:
    """Convert every stored record of the clusters to the form this BKE writes (bke.adapters.state.migrate).

    Safe to re-run: a current record is left alone. A record of a newer BKE is refused (exit 2)."""
    access = resolve_access(workdir, redis_url)

    async def run() -> list[MigrationReport]:
        client = redis_client(access)
        try:
            clusters = names or await known_clusters(client)
            return [await ensure_current(client, c, dry_run=dry_run) for c in clusters]
        finally:
            await client.aclose()

    reports = _run(run(), access)
    for line in migrate_lines(reports):
        typer.echo(line)


def migrate_lines(reports: list[MigrationReport]) -> list[str]:
    """One line per record kind stored: its version and what was (or would be) converted."""
    if not reports:
        return ["no cluster stored: nothing to convert"]
    out = []
    for rep in reports:
        verb = "would convert" if rep.dry_run else "converted"
        for r in rep.results:
            if r.found is None:
                continue
            where = "" if r.header else " (no header yet: members only)"
            if r.converted:
                out.append(f"{rep.cluster} {r.kind}: {verb} v{r.found} -> v{r.found + len(r.steps)}{where}, "
                           f"{r.writes} write(s): " + "; ".join(r.steps))
            else:
                out.append(f"{rep.cluster} {r.kind}: v{r.found}, current{where}")
        total = len(rep.converted)
        out.append(f"{rep.cluster}: {total} record(s) {verb}" if total else f"{rep.cluster}: every record current")
    return out


def _run(coro, access: StoreAccess):  # type: ignore[no-untyped-def]
    try:
        return asyncio.run(coro)
    except PermanentError as exc:
        die(str(exc), EXIT_INVALID)
    except (RedisError, OSError) as exc:
        die(f"Redis at {redact_url(access.url)}: {type(exc).__name__}: {exc}", EXIT_FAILURE)


def register(app: typer.Typer) -> None:
    app.add_typer(state_app, name="state")
