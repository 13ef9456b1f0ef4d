"""What `bke state restore` does with trust material: an older backup never rolls it back.

A backup is a picture of the past. Restored whole, it would bring back what was taken away
since: a revoked identity would connect again, a re-provisioned node's old agent key would be
sealed to again, a replaced signing key would sign again. So by default the trust material
below is taken from the store as it is *now*, and only what the store no longer has comes from
the backup. `bke state restore --replace-trust` takes all of it from the backup instead (the
operator's explicit choice: a store re-initialised after a loss, say, whose new keys no agent
knows); the command's output names each item and where it came from.

    item                  keys                                  restored by default (--replace-trust: the backup's)
    NATS authority        bke:auth:authority                    merged: the current authority (its keys, its
                                                                account) if there is one, else the backup's;
                                                                the revocations of both, each at the later time
                                                                (system users' revocations too)
    bus identities        bke:auth:identities                   merged: each name's current record; a name only
                                                                in the backup comes back, marked revoked when
                                                                the kept authority revokes its key
    command-signing key   bke:command-signing-key               the current key if there is one, else the backup's
    etcd snapshot key     bke:etcd-snapshot-key                 the current key if there is one, else the backup's
    agent keys of <c>     bke:<c>:agents:provisioned,           the cluster's current three, as they are, if any
                          bke:<c>:certs:agents,                 of them exists now; else the backup's three
                          bke:<c>:agents:accepted

Why each:

* Revocations only ever grow: a union cannot re-admit anyone, and keeps a revocation made since
  the backup. The current authority's keys are kept because the running nats-server trusts its
  operator and preloads its account, and every creds file in use is signed by it.
* The command-signing key: agents were given its public half; a key replaced since the backup
  (because the old one leaked, say) must not sign again.
* The etcd snapshot key: snapshots taken since the backup are sealed to the current key. Kept,
  nothing is lost for good: the backup's key is still in the backup file.
* Agent keys: `provisioned` is what certs seals to and what commands are bound to; `certs:agents`
  and `accepted` are the registrations accepted for those keys. They go together per cluster, so
  that a node provisioned again, or removed (its entries deleted), stays so. A cluster with none
  of the three now (deleted since, or a store that lost its state) gets the backup's: the nodes'
  bus identities, revoked with the cluster, stay revoked by the merged authority.

From the backup, as everything else (they are the cluster's data, not who is trusted): the
epoch, plans and their `incarnation`, the PKI (`bke:<c>:pki:*`), the kubeconfigs
(`api-credentials`), the sealed file sets (`files:certs`: a bundle sealed to a key replaced since
opens only with that old key), the VRRP password, the agents' own announcements (`bke:<c>:agents`).

A lab keeps its own copy of the authority (`runtime/auth/authority.enc`, the one its nats-server
was started with), whose revocations its next identity step merges into Redis
(bke.lab.identities): there, a revocation made since the backup comes back even after
`--replace-trust`. A restore sends nothing to nats-server: the server keeps the account JWT it
was last sent (its resolver directory), and the next push sends the restored authority's.

`decide_trust` is pure (no Redis): it takes the backup's entries and the current ones (the
backup format of bke.adapters.state.backup) and returns what to write and the decisions to report.
"""
from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from bke.adapters.auth.authority import Authority
from bke.core.errors import PermanentError
from bke.core.secrets.at_rest import SecretBox
from .keys.auth import auth_authority_key, auth_identities_key
from .keys.trust import command_signing_key, etcd_snapshot_key

__all__ = ["TRUST_ITEMS", "TrustDecision", "TrustError", "TrustItem", "TrustPlan", "decide_trust", "trust_group"]

Entry = dict[str, Any]  # one key in the backup format: {"key", "type", "pttl", "value"}, bytes in base64
Source = Literal["current", "backup", "merged"]
_AGENT_KEYS = re.compile(r"^bke:([^:]+):(agents:provisioned|certs:agents|agents:accepted)$")


class TrustError(PermanentError):
    """The current trust material cannot be read (another operator key): nothing was changed."""


@dataclass(frozen=True)
class TrustItem:
    name: str
    match: Callable[[str], str | None]  # a key -> its group ("" or the cluster), None: not this item
    rule: str  # the default, in a few words (the CLI's help reads it)


def _exactly(key: str) -> Callable[[str], str | None]:
    return lambda k: "" if k == key else None


def _agent_keys(k: str) -> str | None:
    m = _AGENT_KEYS.match(k)
    return m.group(1) if m else None


TRUST_ITEMS: tuple[TrustItem, ...] = (
    TrustItem("NATS authority", _exactly(auth_authority_key()), "current keys, revocations of both"),
    TrustItem("bus identities", _exactly(auth_identities_key()), "current records, backup-only names added"),
    TrustItem("command-signing key", _exactly(command_signing_key()), "current if any"),
    TrustItem("etcd snapshot key", _exactly(etcd_snapshot_key()), "current if any"),
    TrustItem("agent keys", _agent_keys, "a cluster's current ones if it has any"),
)


def trust_group(key: str) -> tuple[TrustItem, str] | None:
    """The trust item a key belongs to, and its group; None for every other key."""
    for item in TRUST_ITEMS:
        group = item.match(key)
        if group is not None:
            return item, group
    return None


@dataclass(frozen=True)
class TrustDecision:
    item: str  # "agent keys of seed" for a cluster's group
    source: Source
    detail: str


@dataclass(frozen=True)
class TrustPlan:
    entries: list[Entry]  # every key to write: the backup's other keys and the trust keys decided
    decisions: list[TrustDecision] = field(default_factory=list)


def _key(e: Entry) -> str:
    return base64.b64decode(e["key"]).decode(errors="replace")


def _raw(e: Entry) -> bytes:
    return base64.b64decode(e["value"])


def _hash(e: Entry | None) -> dict[str, str]:
    if e is None:
        return {}
    return {base64.b64decode(f).decode(errors="surrogateescape"): base64.b64decode(v).decode(errors="surrogateescape")
            for f, v in e["value"].items()}


def _hash_entry(key: str, fields: dict[str, str], like: Entry) -> Entry:
    value = {base64.b64encode(f.encode(errors="surrogateescape")).decode():
             base64.b64encode(v.encode(errors="surrogateescape")).decode() for f, v in sorted(fields.items())}
    return {**like, "key": base64.b64encode(key.encode()).decode(), "type": "hash", "value": value}


def _open(e: Entry, box: SecretBox | None, whose: str) -> Authority:
    if box is None:
        raise TrustError("merging the NATS authority needs the operator key")
    try:
        return Authority.from_secret_json(box.decrypt(_raw(e), auth_authority_key().encode()))
    except PermanentError as exc:
        raise TrustError(f"the {whose} NATS authority ({auth_authority_key()}) does not open: {exc}; "
                         "--replace-trust restores the backup's as it is") from None


def decide_trust(backup: Iterable[Entry], current: Iterable[Entry], box: SecretBox | None, *,
                 replace_trust: bool = False) -> TrustPlan:
    """What to write for a restore of `backup` over a store whose trust keys are `current`
    (see the module docstring); TrustError if the current authority does not open."""
    backup, current = list(backup), list(current)
    plain = [e for e in backup if trust_group(_key(e)) is None]
    bak = {_key(e): e for e in backup if trust_group(_key(e)) is not None}
    cur = {_key(e): e for e in current if trust_group(_key(e)) is not None}
    if replace_trust:
        shown = sorted({_label(k) for k in bak}) or ["none in the backup"]
        return TrustPlan(plain + list(bak.values()),
                         [TrustDecision(", ".join(shown), "backup", "replaced with the backup's (--replace-trust)")])
    out, decisions = list(plain), []
    authority, decision = _authority(bak.get(auth_authority_key()), cur.get(auth_authority_key()), box, out)
    decisions += [decision] if decision else []
    decisions += _identities(bak.get(auth_identities_key()), cur.get(auth_identities_key()), authority, out)
    for item, key in (("command-signing key", command_signing_key()), ("etcd snapshot key", etcd_snapshot_key())):
        decisions += _single(item, bak.get(key), cur.get(key), out)
    for c in sorted({c for k in (*bak, *cur) if (c := _agent_keys(k)) is not None}):
        decisions.append(_agents(c, {k: e for k, e in bak.items() if _agent_keys(k) == c},
                                 {k: e for k, e in cur.items() if _agent_keys(k) == c}, out))
    return TrustPlan(out, decisions)


def _label(key: str) -> str:
    found = trust_group(key)
    assert found is not None
    item, group = found
    return f"{item.name} of {group}" if group else item.name


def _authority(bak: Entry | None, cur: Entry | None, box: SecretBox | None,
               out: list[Entry]) -> tuple[Authority | None, TrustDecision | None]:
    item = "NATS authority"
    if cur is None:
        if bak is None:
            return None, None
        out.append(bak)
        return (_open(bak, box, "backup's") if box else None), TrustDecision(item, "backup", "none now: the backup's")
    if bak is None:
        out.append(cur)
        return (_open(cur, box, "current") if box else None), TrustDecision(item, "current", "none in the backup")
    kept, old = _open(cur, box, "current"), _open(bak, box, "backup's")
    added = kept.merge_revocations(old)
    other = "" if old.account.public == kept.account.public else f"; the backup's is another account ({old.account.public[:12]}...)"
    total = len(kept.revocations) + len(kept.system_revocations)
    if added:
        assert box is not None
        out.append({**cur, "value": base64.b64encode(box.encrypt(kept.to_secret_json(), auth_authority_key().encode())).decode()})
    else:
        out.append(cur)
    return kept, TrustDecision(item, "merged" if added else "current",
                               f"account {kept.account.public[:12]}... kept; {total} revocations, {added} of them "
                               f"from the backup{other}")


def _identities(bak: Entry | None, cur: Entry | None, authority: Authority | None, out: list[Entry]) -> list[TrustDecision]:
    if bak is None and cur is None:
        return []
    now, old = _hash(cur), _hash(bak)
    added = {n: v for n, v in old.items() if n not in now}
    for name, raw in list(added.items()):
        record = json.loads(raw)
        at = authority.revocations.get(record.get("public", "")) if authority is not None else None
        if record.get("revoked_at") is None and at is not None:
            added[name] = json.dumps({**record, "revoked_at": at}, sort_keys=True)
    like = cur or bak
    assert like is not None
    out.append(_hash_entry(auth_identities_key(), {**added, **now}, like))
    source: Source = "current" if not added else ("merged" if now else "backup")
    return [TrustDecision("bus identities", source, f"{len(now)} current record(s) kept, {len(added)} only in the backup added")]


def _single(item: str, bak: Entry | None, cur: Entry | None, out: list[Entry]) -> list[TrustDecision]:
    if cur is None:
        if bak is None:
            return []
        out.append(bak)
        return [TrustDecision(item, "backup", "none now: the backup's")]
    out.append(cur)
    same = bak is not None and _raw(bak) == _raw(cur)
    return [TrustDecision(item, "current", "the same as the backup's" if same else
                          "none in the backup" if bak is None else "kept; the backup's differs and is not restored")]


def _agents(cluster: str, bak: dict[str, Entry], cur: dict[str, Entry], out: list[Entry]) -> TrustDecision:
    item = f"agent keys of {cluster}"
    if not cur:
        out += bak.values()
        return TrustDecision(item, "backup", "none now: the backup's")
    out += cur.values()
    provisioned = f"bke:{cluster}:agents:provisioned"
    now, old = _hash(cur.get(provisioned)), _hash(bak.get(provisioned))
    changed = sorted(n for n in {*now, *old} if now.get(n) != old.get(n))
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    return TrustDecision(item, "current", f"{len(now)} node(s) kept" + (
        f"; provisioned since the backup, or removed: {shown}" if changed else "; the same as the backup's"))
