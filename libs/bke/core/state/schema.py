"""What BKE stores for a cluster, as a table: record kind -> keys -> where its version lives.

Why: an upgrade of BKE may change the form of what it stores (a plan, the PKI, the phase
state). Such a change must be converted explicitly (bke.adapters.state.migrate), and a reader must never
misread a form it does not know. So every record names its version, and this table says where.

A *record* is the set of keys one writer keeps consistent together (the plan and its meta, the
PKI's manifest and its hashes, the install and its phases and per-node commands). Its version
lives in one place, its *header*, written in the same command or script as the header's other
fields, so versioning costs no extra round trip on any write path:

    hash header  a reserved field `schemaVersion` in a hash the record's writer creates once
                 (`plan-meta`, `install`, `certs:ops`)
    JSON header  a field of a JSON document the writer rewrites whole (`render:meta`, `rotation`;
                 the PKI manifest's `version`, there since its first form)

The per-node keys (commands, node status, file sets: written per node at 10,000 nodes) carry
no version of their own: they are in the form of their record's header.

Version rules (the readers' rule, `check_readable`):
  - a header without a version (written before versions existed) is version `first` (0);
  - a record NEWER than `current` is refused with `StoredVersionTooNew`, never misread: the
    store was converted by a newer BKE, so this code must not run on it;
  - a record OLDER than `readable_from` is refused with `StoredVersionTooOld`, naming
    `bke state migrate`. Older records are converted by `ensure_current` (bke.adapters.state.migrate),
    run by that command and at the start of every upgrade, never on read: a conversion writes,
    and readers run under ACL users that may not write these keys, on hot paths (a 10,000-node
    read must not pay for it) and in several replicas at once. A reader reads an older version
    directly only where the two forms are the same apart from the version (`readable_from`).

Errors (both permanent: the message cannot succeed until a person acts)::

    PermanentError
     └─ StoredVersionError
         ├─ StoredVersionTooNew   the record is of a version this code does not know
         └─ StoredVersionTooOld   the record must be converted first (`bke state migrate`)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bke.core.errors import PermanentError

__all__ = [
    "RECORDS", "SCHEMA_FIELD", "UNVERSIONED", "RecordKind", "StoredVersionError", "StoredVersionTooNew",
    "StoredVersionTooOld", "VersionSlot", "check_readable", "parse_version", "record_kind",
]

SCHEMA_FIELD = "schemaVersion"


class StoredVersionError(PermanentError):
    def __init__(self, kind: str, version: int, what: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.version, self.what = kind, version, what


class StoredVersionTooNew(StoredVersionError):
    pass


class StoredVersionTooOld(StoredVersionError):
    pass


@dataclass(frozen=True)
class VersionSlot:
    """Where a record's version is: `key` (a name under `bke:<cluster>:`) and its `field`."""

    key: str
    form: Literal["hash", "json"]
    field: str = SCHEMA_FIELD


@dataclass(frozen=True)
class RecordKind:
    name: str
    summary: str
    members: tuple[str, ...]  # names under `bke:<cluster>:`; `*` matches the rest of a name
    slot: VersionSlot
    current: int  # the version this code writes
    first: int = 0  # the version of a header written before versions existed
    readable_from: int = 0  # the oldest version this code's readers read without conversion
    writer: str = ""
    reader: str = ""


def _operation(name: str, summary: str, *more: str, field: str = SCHEMA_FIELD, current: int, first: int = 0,
               readable_from: int = 0, writer: str, reader: str) -> RecordKind:
    """An operation's record (bke.adapters.operation.RecordStore): its JSON under its own name,
    versioned in the JSON, with its agents' answers beside it (and `more` keys of its own)."""
    return RecordKind(name, summary, (name, f"{name}:results", *more), VersionSlot(name, "json", field),
                      current=current, first=first, readable_from=readable_from, writer=writer, reader=reader)


# The table. A new form of a record: bump `current`, register a converter for (name, old) in
# bke.adapters.state.migrate, and raise `readable_from` unless the readers still read the old form as is.
RECORDS: tuple[RecordKind, ...] = (
    RecordKind(
        "plan", "the placement plan the planner stored once (JSON), its meta and the replaceable mark",
        ("plan", "plan-meta", "plan-replaceable"),
        VersionSlot("plan-meta", "hash"), current=1,
        writer="planner: bke.adapters.state.plans.RedisPlanStore.save/replace (one Lua script with the plan)",
        reader="every service: bke.adapters.state.plans.RedisPlanStore.load, PlanCache.load"),
    RecordKind(
        "pki", "certificates (clear), private keys (encrypted at rest), the manifest, the save counter",
        ("pki:manifest", "pki:certs", "pki:keys", "pki:version"),
        VersionSlot("pki:manifest", "json", "version"), current=1, first=1, readable_from=1,
        writer="certs: bke.adapters.pki.store_redis.RedisPkiStore.save (one WATCH/MULTI on pki:version)",
        reader="certs, `bke certs --cluster`: RedisPkiStore.load -> bke.core.pki.manifest.Manifest.from_json"),
    RecordKind(
        "certs", "the certs service's own records: operations seen, renewal answers, agents, sealed file sets, "
                 "the API credentials (encrypted kubeconfigs, rewritten at every ensure and renewal)",
        ("certs:ops", "certs:renewal:*", "certs:lease:*", "certs:agents", "agents:provisioned", "files:certs", "files:certs:digest",
         "api-credentials"),
        VersionSlot("certs:ops", "hash"), current=1,
        writer="certs: bke_certs.operations.OpsStore, bke_certs.handlers, bke.adapters.state.nodefiles (certs source), "
               "bke.adapters.pki.api_credentials.write_api_credentials",
        reader="certs: OpsStore.view, handlers; dispatcher: RedisNodeFiles (files:certs); dispatcher and upgrader: "
               "bke.adapters.pki.api_credentials.read_api_credential"),
    RecordKind(
        "render", "rendered per-node file sets, addon manifests, the render meta, the VRRP password",
        ("render:meta", "files:render", "files:render:digest", "files:render:signatures", "addon-manifests",
         "render:vrrp-password"),
        VersionSlot("render:meta", "json"), current=1,
        writer="renderer: bke_renderer.store_redis.RedisRenderStore.save (one MULTI/EXEC)",
        reader="renderer: RedisRenderStore.load/load_node; dispatcher: RedisNodeFiles, addons phase"),
    RecordKind(
        "install", "the phase state: install record, phases, per-node commands and status, leases, inputs, "
                   "agents accepted, refusals, addons, labels, health, heartbeats",
        ("install", "inputs", "sealed", "phase:*", "cmd:*", "node", "lease:*", "agents:accepted", "refusals",
         "addons", "node-labels", "health", "health-meta", "health-pods", "heartbeat", "heartbeat:cgroup",
         "heartbeat:runtime",
         "agents", "paused"),
        VersionSlot("install", "hash"), current=1,
        writer="dispatcher: bke_dispatcher.state.DispatcherState.start_install (header), its phases",
        reader="dispatcher: DispatcherState.install, status"),
    _operation(
        "rotation", "the current or last certificate rotation (JSON) and its agents' answers", current=1,
        writer="dispatcher: bke_dispatcher.ops.rotation.run.RotationStore (Rotation.to_json)",
        reader="dispatcher: RotationStore (Rotation.from_json)"),
    _operation(
        "reset", "the current or last reset or delete (JSON) and its agents' answers",
        current=1, first=1, readable_from=1,  # new: never stored without a version
        writer="dispatcher: bke_dispatcher.ops.reset.run.ResetStore (Reset.to_json)",
        reader="dispatcher: ResetStore (Reset.from_json)"),
    _operation(
        "join", "the current or last join of workers and etcd-only nodes (JSON) and its agents' answers",
        # 1: new, never stored without a version; 2: the record keeps the etcd-only nodes' etcd
        # joins (`etcd_joins`); 3: it keeps when the join began to wait for its agents
        # (`agents_since`, the agents' deadline's start); 4: the ports held by the running parts
        # of nodes joining again with more parts (`held_ports`). Versions 1 to 3 are read as is
        # (no etcd joins; the clock starts at the next pass; no node joins again), so readable
        # from 1; a reader of an older version refuses a newer record instead of failing on the
        # new field.
        current=4, first=1, readable_from=1,
        writer="dispatcher: bke_dispatcher.ops.join.run.JoinStore (Join.to_json)",
        reader="dispatcher: JoinStore.load (Join.from_json)"),
    _operation(
        "removal", "the current or last removal of workers (JSON), its agents' answers, the lab's drain and "
                   "Node deletion records", "removal:api",
        current=1, first=1, readable_from=1,  # new: never stored without a version
        writer="dispatcher: bke_dispatcher.ops.removal.run.RemovalStore (Removal.to_json)",
        reader="dispatcher: RemovalStore.load (Removal.from_json)"),
    _operation(
        "upgrade", "the current or last upgrade (JSON), its agents' answers, the lab's drain records, "
                   "each node's versions after the last upgrade that served it",
        "upgrade:drain", "upgrade:certs", "upgrade:paused", "upgrade:nodes",
        field="schema_version", current=1, first=1, readable_from=1,
        writer="upgrader: bke_upgrader.store.UpgradeStore (bke.core.upgrade.run.UpgradeRun.to_json)",
        reader="upgrader: UpgradeStore.load (UpgradeRun.from_json)"),
    _operation(
        "etcd-restore", "the current or last etcd restore (JSON) and its agents' answers",
        field="schema_version", current=1, first=1, readable_from=1,
        writer="upgrader: bke_upgrader.ops.restore.store.RestoreStore (bke.core.etcdsnap.restore_run.RestoreRun.to_json)",
        reader="upgrader: RestoreStore.load (RestoreRun.from_json)"),
    RecordKind(
        "operation", "the cluster's operation slot: the one operation running (kind, request id, since)",
        ("operation",),
        VersionSlot("operation", "hash"), current=1, first=1, readable_from=1,  # new: never stored without a version
        # one key claimed by every service that starts an operation (certs and upgrader too); the
        # dispatcher is named as writer so that it removes the slot with a deleted cluster's records
        writer="dispatcher: bke.adapters.state.operation_slot.claim_operation/release_operation (also upgrader, certs)",
        reader="every service that starts an operation; dispatcher status: operation_holder"),
)

# Keys outside any cluster's records, and why they carry no version: each is a scalar or a set of
# names whose form cannot change without a new key name, or a deployment secret with a format
# of its own. `bke state migrate` converts clusters; these are listed so that the inventory is
# complete (a test checks every key of bke.adapters.state.keys is in one of the two tables).
UNVERSIONED: tuple[tuple[str, str], ...] = (
    ("bke:epoch", "a random id (bke.adapters.state.epoch)"),
    ("bke:clusters", "set of cluster names (planner)"),
    ("bke:installs", "set of cluster names (dispatcher)"),
    ("bke:rotations", "set of cluster names (dispatcher)"),
    ("bke:resets", "set of cluster names (dispatcher)"),
    ("bke:joins", "set of cluster names (dispatcher)"),
    ("bke:removals", "set of cluster names (dispatcher)"),
    ("bke:upgrades", "set of cluster names (upgrader)"),
    ("bke:etcd-restores", "set of cluster names (upgrader)"),
    ("bke:pki-clusters", "set of cluster names (certs)"),
    # advisory, for a dashboard: each entry names its own form (`v`), a reader skips one it does not know
    ("bke:recent-plans", "bounded list of JSON entries (planner)"),
    ("bke:recent-renders", "bounded list of JSON entries (renderer)"),
    ("bke:request:*", "request id -> cluster name (planner)"),
    ("bke:auth:authority", "encrypted blob of the NATS trust chain, its format is bke.adapters.auth.registry's"),
    ("bke:auth:identities", "identity -> issued record, deployment-wide (bke.adapters.auth.registry)"),
    ("bke:command-signing-key", "encrypted key, its format is bke.core.secrets.signing's"),
    ("bke:command-signing-key:next", "encrypted key, its format is bke.core.secrets.signing's (a rollover's next)"),
    ("bke:command-key-rollover", "JSON with a form of its own (bke.core.secrets.command_key_rollover)"),
    ("bke:command-key-rollover:acks", "hash of cluster/node -> key id (dispatcher)"),
    ("bke:etcd-snapshot-key", "encrypted key, its format is bke.core.secrets.snapshot_key's"),
    ("bke:plan-signing-key", "public half in clear, private half encrypted (bke.core.secrets.record_signing)"),
    ("bke:render-signing-key", "public half in clear, private half encrypted (bke.core.secrets.record_signing)"),
)


def record_kind(name: str) -> RecordKind:
    for kind in RECORDS:
        if kind.name == name:
            return kind
    raise KeyError(name)


def parse_version(kind: RecordKind, raw: object) -> int:
    """The version a header holds: `raw` is the slot's value (None: written before versions)."""
    if raw is None:
        return kind.first
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        return int(text)
    except ValueError:
        # Not a version this code wrote: refuse it like an unknown one rather than guess.
        raise StoredVersionTooNew(kind.name, -1, "", f"{kind.name} record: version {text!r} is not a number") from None


def check_readable(kind_name: str, raw: object, what: str) -> int:
    """The readers' rule (module docstring): the version, or a typed refusal naming `what`."""
    kind = record_kind(kind_name)
    version = parse_version(kind, raw)
    if version > kind.current:
        raise StoredVersionTooNew(kind.name, version, what,
                                  f"{what} is stored in {kind.name} form version {version}, newer than this BKE reads "
                                  f"({kind.current}): it was written by a newer BKE; run that version")
    if version < kind.readable_from:
        raise StoredVersionTooOld(kind.name, version, what,
                                  f"{what} is stored in {kind.name} form version {version}, older than this BKE reads "
                                  f"({kind.readable_from}..{kind.current}): convert it with `bke state migrate`")
    return version
