"""`bke keys`: the at-rest keys, one per kind (bke.core.secrets.key_kinds), and their rotation.

    bke keys init DIR          a key file per kind in DIR (0600; a file that exists is kept)
    bke keys list              each kind's file and keys; with --workdir or --redis, also how many
                               stored records each key encrypts
    bke keys add KIND          stage a new key as `next`: it decrypts at once, encrypts once rotated to
    bke keys rotate KIND       the staged (else a new) key encrypts, the old one is kept as
                               `previous`; every record of KIND is re-encrypted under the new key
    bke keys retire KIND       every record under the current key (stragglers re-encrypted), then
                               the previous keys leave the file
    bke keys command-key ...   a rollover of the command-signing key itself (command_key_cmd.py)

Which file: with `--workdir`, the lab's `<lab>/keys/<kind>.key` (its processes read it again
when it changes, so the lab rotates without a restart). Otherwise BKE_KEY_FILE_<KIND>; a kind
that still reads the shared BKE_SECRET_KEY_FILE is never rotated in that file (the other kinds
use it): name a new file in BKE_KEY_FILE_<KIND>, and `add` or `rotate` start it from the shared
keys. The records are reached as the state's admin (`--workdir`, or `--redis URL` / BKE_REDIS_URL),
like `bke state`; the `backup` kind's records are the backup files named with `--backup`.

The order for processes that get their files one by one (Kubernetes, compose): `add`, give
every holder the file, `rotate`, give it again, `retire` once every holder runs with the
rotated file (docs/keys.md).
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Optional, TypeVar

import typer
from redis.asyncio import Redis
from redis.exceptions import RedisError

from bke.core.errors import PermanentError
from bke.lab.key_files import lab_key_file
from bke.adapters.runtime.nats_security import load_runtime_authority, save_runtime_authority
from bke.core.secrets.at_rest import SECRET_KEY_ENV, Keyring, SecretKeyError, create_key_file, load_keyring, new_key, write_keyring
from bke.core.secrets.key_kinds import KIND_NAMES, KINDS, SERVICE_KEY_KINDS, key_file_env
from bke.adapters.state.client import StoreAccess, redact_url, redis_client
from bke.adapters.state.rekey import RekeyReport, census, reencrypt_kind, rekey_backup_file

from .output import EXIT_FAILURE, EXIT_INVALID, die, warn_lines
from .state_cmd import resolve_access

__all__ = ["register"]

T = TypeVar("T")

keys_app = typer.Typer(no_args_is_help=True, help="At-rest keys, one per kind: list, add, rotate, retire; the command-key rollover.")
WORKDIR = typer.Option(None, "--workdir", help="a lab's work directory")
REDIS = typer.Option(None, "--redis", help="Redis URL with the admin user (else BKE_REDIS_URL)")
BACKUPS = typer.Option(None, "--backup", help="a `bke state backup` file to re-encrypt (kind backup; repeatable)")


def _kind(kind: str) -> str:
    if kind not in KIND_NAMES:
        die(f"unknown key kind {kind!r} (one of {', '.join(KIND_NAMES)})", EXIT_INVALID)
    return kind


def _holders(kind: str) -> str:
    names = [svc for svc, kinds in SERVICE_KEY_KINDS.items() if kind in kinds]
    return ", ".join(names) if names else "the CLI and the lab only"


def _file(kind: str, workdir: Path | None) -> tuple[Path, Path | None]:
    """The file `bke keys` writes for `kind`, and the shared file to start it from if it is new."""
    if workdir is not None:
        return lab_key_file(workdir.resolve(), kind), None
    own, shared = os.environ.get(key_file_env(kind), "").strip(), os.environ.get(SECRET_KEY_ENV, "").strip()
    if not own:
        hint = f" ({SECRET_KEY_ENV}, which the other kinds read too, is never rotated)" if shared else ""
        die(f"{key_file_env(kind)} is not set: name the file of the '{kind}' key{hint}", EXIT_INVALID)
    return Path(own), Path(shared) if shared else None


def _ring(path: Path, start: Path | None, must_exist: bool = False) -> Keyring:
    try:
        if path.exists() or start is None or must_exist:
            return load_keyring(path)
        return load_keyring(start)  # a kind leaving the shared file starts from its keys
    except SecretKeyError as exc:
        die(str(exc), EXIT_INVALID)


def _ids(ring: Keyring) -> str:
    return ", ".join(f"{role} {kid}" for role, kid in ring.key_ids)


@keys_app.command("init")
def init_cmd(folder: Path = typer.Argument(..., help="where to write <kind>.key for every kind")) -> None:
    """A new key file per kind in FOLDER (0600, FOLDER 0700); a file that exists is kept."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    for kind in KIND_NAMES:
        path = folder / f"{kind}.key"
        try:
            made = create_key_file(path).key_id
            typer.echo(f"{kind:<10} {path}: made, key {made} (given to {_holders(kind)})")
        except FileExistsError:
            typer.echo(f"{kind:<10} {path}: kept ({_ids(_ring(path, None))})")


@keys_app.command("list")
def list_cmd(workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS) -> None:
    """Each kind's key file and keys; with a store, how many records each key encrypts."""
    counts: dict[str, RekeyReport] = {}
    if workdir is not None or redis_url or os.environ.get("BKE_REDIS_URL"):
        access = resolve_access(workdir, redis_url)
        counts = _store(access, lambda r: _all(r, [c for c in KIND_NAMES if c != "backup"], census))
    for k in KINDS:
        if workdir is not None:
            path, source = lab_key_file(workdir.resolve(), k.name), "lab"
        elif os.environ.get(key_file_env(k.name), "").strip():
            path, source = Path(os.environ[key_file_env(k.name)].strip()), key_file_env(k.name)
        elif os.environ.get(SECRET_KEY_ENV, "").strip():
            path, source = Path(os.environ[SECRET_KEY_ENV].strip()), f"{SECRET_KEY_ENV}, shared with other kinds"
        else:
            typer.echo(f"{k.name:<10} no file ({key_file_env(k.name)} unset)")
            continue
        try:
            keys = _ids(load_keyring(path))
        except SecretKeyError as exc:
            keys = f"unreadable: {exc}"
        typer.echo(f"{k.name:<10} {path} ({source}): {keys}")
        if k.name in counts:
            rep = counts[k.name]
            typer.echo(f"{'':<10} {rep.blobs} record(s): " + (", ".join(f"{n} under {kid}" for kid, n in
                                                                         sorted(rep.by_key.items())) or "none"))


async def _all(redis: Redis, kinds: list[str], walk: Callable[[Redis, str], Awaitable[RekeyReport]]
               ) -> dict[str, RekeyReport]:
    return {kind: await walk(redis, kind) for kind in kinds}


def _store(access: StoreAccess, work: Callable[[Redis], Awaitable[T]], hint: str = "") -> T:
    """`work` with an admin client; a failure ends the command (`hint`: what to run next)."""
    async def run() -> T:
        client = redis_client(access)
        try:
            return await work(client)
        finally:
            await client.aclose()

    try:
        return asyncio.run(run())
    except PermanentError as exc:
        die(f"{exc}{hint}", EXIT_INVALID)
    except (RedisError, OSError) as exc:
        die(f"Redis at {redact_url(access.url)}: {type(exc).__name__}: {exc}{hint}", EXIT_FAILURE)


@keys_app.command("add")
def add_cmd(kind: str = typer.Argument(..., help=f"one of {', '.join(KIND_NAMES)}"),
            workdir: Optional[Path] = WORKDIR) -> None:
    """Stage a new key (`next`): every holder decrypts with it once it has the file; `rotate`
    then makes it the key that encrypts."""
    path, start = _file(_kind(kind), workdir)
    ring = _ring(path, start)
    try:
        staged = ring.staged(new_key())
    except ValueError as exc:
        die(f"{path}: {exc}", EXIT_INVALID)
    write_keyring(path, staged, kind)
    typer.echo(f"{kind}: {path}: {_ids(staged)}")
    typer.echo(f"give this file to {_holders(kind)}, then: bke keys rotate {kind}")


def _reencrypt(kind: str, ring: Keyring, workdir: Path | None, redis_url: str | None,
               backups: list[Path], hint: str = "") -> RekeyReport:
    """Every record of `kind` under the ring's current key (Redis, a lab's authority file,
    the backup files named)."""
    box = ring.box()
    if kind == "backup":
        report = RekeyReport(kind)
        for file in backups:
            try:
                report.rewritten += rekey_backup_file(file, box)
            except (OSError, ValueError, PermanentError) as exc:
                die(f"{file}: {exc}", EXIT_INVALID)
            report.blobs += 1
            report.by_key[box.key_id] += 1
        return report
    report = _store(resolve_access(workdir, redis_url), lambda r: reencrypt_kind(r, kind, box), hint)
    if kind == "authority" and workdir is not None:  # the lab's runtime keeps its own copy
        enc, key_file = workdir.resolve() / "runtime" / "auth" / "authority.enc", lab_key_file(workdir.resolve(), kind)
        if enc.exists():
            save_runtime_authority(enc, key_file, load_runtime_authority(enc, key_file))
            report.blobs += 1
            report.rewritten += 1
            report.by_key[box.key_id] += 1
    return report


def _said(report: RekeyReport) -> str:
    under = ", ".join(f"{n} under {kid}" for kid, n in sorted(report.by_key.items())) or "none"
    return f"{report.blobs} record(s), {report.rewritten} re-encrypted now; {under}"


@keys_app.command("rotate")
def rotate_cmd(kind: str = typer.Argument(..., help=f"one of {', '.join(KIND_NAMES)}"),
               workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS,
               backups: Optional[list[Path]] = BACKUPS) -> None:
    """The staged key (else a new one) encrypts from now on; every record of KIND is re-encrypted
    under it. The old key stays in the file (`previous`) until `bke keys retire`."""
    path, start = _file(_kind(kind), workdir)
    old = _ring(path, start)
    ring = old.rotated(new_key())
    write_keyring(path, ring, kind)
    typer.echo(f"{kind}: {path}: {_ids(ring)}")
    # a walk cut short leaves records under a key every holder still has: retire finishes it
    hint = (f" (the keyring is rotated already; what is left is re-encrypted by `bke keys retire {kind}`, "
            "run once every holder has the file)")
    report = _reencrypt(kind, ring, workdir, redis_url, backups or [], hint)
    typer.echo(f"{kind}: {_said(report)}")
    typer.echo(f"once {_holders(kind)} run with this file: bke keys retire {kind}")


@keys_app.command("retire")
def retire_cmd(kind: str = typer.Argument(..., help=f"one of {', '.join(KIND_NAMES)}"),
               workdir: Optional[Path] = WORKDIR, redis_url: Optional[str] = REDIS,
               backups: Optional[list[Path]] = BACKUPS) -> None:
    """Re-encrypt what is still under a previous key, then drop the previous keys from the file.
    Refused while a record stays under another key (a holder still encrypting with an old file)."""
    path, _ = _file(_kind(kind), workdir)
    ring = _ring(path, None, must_exist=True)
    if not ring.previous:
        typer.echo(f"{kind}: {path}: no previous key to retire ({_ids(ring)})")
        return
    report = _reencrypt(kind, ring, workdir, redis_url, backups or [])
    current = ring.box().key_id
    left = {kid: n for kid, n in report.by_key.items() if kid != current}
    if left:
        die(f"{kind}: {', '.join(f'{n} record(s) under {kid}' for kid, n in sorted(left.items()))} after "
            f"re-encryption: a holder still encrypts with an older file; give {_holders(kind)} {path} and run "
            "this again", EXIT_FAILURE)
    retired = [kid for role, kid in ring.key_ids if role == "previous"]
    write_keyring(path, ring.retired(), kind)
    typer.echo(f"{kind}: {_said(report)}")
    typer.echo(f"{kind}: {path}: retired {', '.join(retired)}; {_ids(ring.retired())}")
    warn_lines([f"backups taken before this hold {kind} records under the retired key(s): keep a copy of the "
                "old key file with them, or take a new backup"])


def register(app: typer.Typer) -> None:
    from .command_key_cmd import command_key_app  # it builds on this module's options and store access

    keys_app.add_typer(command_key_app, name="command-key")
    app.add_typer(keys_app, name="keys")
