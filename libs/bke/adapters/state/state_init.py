"""`bke state init`: what a deployment's state must hold before its services start.

Why the admin side makes it and not the services: a service that could write `bke:epoch` could
also delete it and halt every other service as "state lost" (bke.adapters.state.epoch), and one that
could write the etcd snapshot key could replace it with a key of its own and open every later
snapshot. So the services' Redis users only read both (bke.adapters.runtime.redis_acl), and the admin
user makes them once:

    bke:epoch              a new random id (SET NX: a second init keeps the first one)
    bke:etcd-snapshot-key  the deployment's etcd snapshot key, encrypted with the `snapshot` key
                           (SET NX, bke.core.secrets.snapshot_key), its public half in clear for the
                           dispatcher; only when that key is given (`box`)
    bke:command-signing-key  the dispatcher's command-signing key (SET NX, bke.core.secrets.signing;
                           a dispatcher that finds none makes it too), when the `signing` key
                           that encrypts it is given (`signing_box`): made here so that the operator
                           holds its public half, from the admin side, before any agent is given
                           it (`bke state init` prints its fingerprint and `--command-key-out FILE`
                           writes its public line: what `bke agent bootstrap` pins,
                           bke.core.secrets.command_key_pin)
    bke:<writer>-signing-key  the plan and render writers' signing keys (SET NX,
                           bke.adapters.state.record_keys), each when its at-rest key (`plan`,
                           `render`) is given (`record_boxes`); then the plans and rendered file
                           sets stored before signatures are signed with them
                           (bke.adapters.state.sign_unsigned)

Run by `bke state init` (a deployment, as the admin user) and by the lab: its runtime writes
the epoch when it starts (bke.adapters.runtime.embedded), the supervisor runs the whole of it. Safe to
re-run: what exists is kept, byte for byte, but for a snapshot key stored in its older form
(without its public half), which is rewritten in the current one (the same key: what was sealed
to it still opens). On a store that lost its state, `bke state restore`
is the way back; an init there starts a new state (and the certs service's CA guard still keeps
a second CA off the nodes).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Mapping
from typing import Any, Callable

from redis.exceptions import WatchError

from bke.core.secrets import SecretBox
from bke.core.secrets.signing import CommandVerifyKey, ensure_command_key_sync
from bke.core.secrets.snapshot_key import ensure_snapshot_key_sync, upgrade_stored_form
from .epoch import ensure_epoch_sync, new_epoch
from .keys.trust import command_signing_key, etcd_snapshot_key
from .record_keys import ensure_record_keys_sync
from .sign_unsigned import sign_unsigned_sync

__all__ = ["StateInit", "ensure_state"]


@dataclass(frozen=True)
class StateInit:
    epoch: str
    epoch_made: bool  # False: the store had one already
    snapshot_key_id: str | None = None  # None: no operator key was given, the key was not looked at
    snapshot_key_made: bool = False
    command_key: CommandVerifyKey | None = None  # the public half; None: no signing_box was given
    command_key_made: bool = False
    record_keys: tuple[tuple[str, str, bool], ...] = ()  # (writer, key id, made now) for each writer given
    signed_now: tuple[tuple[str, int], ...] = ()  # (writer, records signed now that had no signature)


def ensure_state(redis: Any, box: SecretBox | None, *, make_epoch: Callable[[], str] = new_epoch,
                 signing_box: SecretBox | None = None, record_boxes: Mapping[str, SecretBox] | None = None) -> StateInit:
    """Make what is missing (see the module docstring) through a blocking admin client."""
    done = _ensure_keys(redis, box, make_epoch, signing_box)
    if not record_boxes:
        return done
    signers = ensure_record_keys_sync(redis, record_boxes)
    signed = sign_unsigned_sync(redis, {w: s for w, (s, _) in signers.items()})
    return replace(done, record_keys=tuple((w, s.key_id, made) for w, (s, made) in signers.items()),
                   signed_now=tuple(signed.items()))


def _ensure_keys(redis: Any, box: SecretBox | None, make_epoch: Callable[[], str],
                 signing_box: SecretBox | None) -> StateInit:
    candidate = make_epoch()
    epoch = ensure_epoch_sync(redis, candidate)
    if box is None:
        return StateInit(epoch, epoch == candidate)
    had_key = bool(redis.exists(etcd_snapshot_key()))
    key = ensure_snapshot_key_sync(redis, etcd_snapshot_key(), box)
    _with_public_half(redis, box)
    done = StateInit(epoch, epoch == candidate, key.key_id, not had_key)
    if signing_box is None:
        return done
    had_signer = bool(redis.exists(command_signing_key()))
    signer = ensure_command_key_sync(redis, command_signing_key(), signing_box)
    return replace(done, command_key=signer.verify_key, command_key_made=not had_signer)


def _with_public_half(redis: Any, box: SecretBox) -> None:
    """The snapshot key's record in its current form (under WATCH: a concurrent writer wins)."""
    with redis.pipeline() as pipe:
        pipe.watch(etcd_snapshot_key())
        blob = pipe.get(etcd_snapshot_key())
        new = None if blob is None else upgrade_stored_form(blob, box)
        if new is None:
            return
        pipe.multi()
        pipe.set(etcd_snapshot_key(), new)
        try:
            pipe.execute()
        except WatchError:
            pass  # rewritten meanwhile (another init): in the current form already
