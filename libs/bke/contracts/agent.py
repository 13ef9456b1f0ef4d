"""The command model between the dispatcher and the node agents (`bke-agent`).

A command is for one node: an id, ordered typed steps, and the dispatcher's Ed25519 signature
over its canonical bytes (`signing_bytes`), valid from `issued_at` to `expires_at`, and bound to
the receiving agent's key and the cluster's incarnation; an agent runs nothing else
(bke.core.secrets.signing, bke.core.secrets.binding; agent/bke_agent/verify.py). Commands and
steps are idempotent: an agent that already completed a command id answers with the
stored result (`replayed=True`) and runs nothing. Files that carry private keys travel
`sealed` to the receiving agent's X25519 key; nothing on the bus holds them in clear.

Subjects (hostnames may hold dots, which NATS reads as token separators, so a node's
token is `node_token(hostname)`):
    bke.v1.agent.<cluster>.<node>.command     dispatcher -> agent   (durable per agent)
    bke.v1.agent.<cluster>.<node>.result      agent -> dispatcher
    bke.v1.agent.<cluster>.<node>.upgrader-result
                                              agent -> upgrader     (the answers to its commands)
    bke.v1.agent.<cluster>.<node>.registered  agent -> dispatcher   (public keys, at start)
    bke.v1.agent.<cluster>.<node>.refused     agent -> dispatcher   (a command it would not run)
    bke.v1.heartbeat.<cluster>.<node>         agent -> dispatcher   (core NATS, not stored)
    bke.v1.agents.provision                   operator -> certs     (request: record an agent's key)
    bke.v1.agents.accepted                    certs -> dispatcher   (a registration with the provisioned key)
    bke.v1.agents.refused                     certs -> dispatcher   (a registration BKE did not provision)
"""
from __future__ import annotations

import json

from typing import Annotated, Literal, Union

from pydantic import Field

from .base import Message
from .statuses import FinishedStatus, StepResultStatus

__all__ = [
    "AGENT_VERSION",
    "subject_node",
    "AGENT_PREFIX",
    "UPGRADER_RESULT",
    "AGENTS_PROVISION",
    "AGENTS_REFUSED",
    "AGENTS_COMMAND_KEY",
    "AGENTS_ACCEPTED",
    "AgentAccepted",
    "CommandKey",
    "GetCommandKey",
    "CLOCK_SKEW_S",
    "COMMAND_VALIDITY_S",
    "AgentProvisioned",
    "AgentRefused",
    "CommandRefused",
    "ProvisionAgent",
    "AgentCommand",
    "AgentHeartbeat",
    "AgentRegistered",
    "AgentRuntime",
    "AgentWheel",
    "RESTART_EXIT_CODE",
    "UpdateAgent",
    "COMMAND_KEY_PHASE",
    "TrustCommandKey",
    "CheckHost",
    "CommandResult",
    "ETCD_SNAPSHOT_BUCKET",
    "PARKED_DIR",
    "EtcdMemberAdd",
    "EtcdMemberPromote",
    "EtcdMemberRemove",
    "EtcdSnapshot",
    "LeaveEtcdMember",
    "ParkStaticPod",
    "RestoreEtcdMember",
    "FetchFile",
    "RemoveFile",
    "RestartStaticPod",
    "ReplaceFiles",
    "ResetNode",
    "NewFile",
    "HealthProbe",
    "RunProgram",
    "Step",
    "StepResult",
    "SystemdUnit",
    "TlsFiles",
    "WaitHealth",
    "WriteFile",
    "agent_subject",
    "node_token",
    "token_node",
    "OUTPUT_LIMIT",
]

AGENT_PREFIX = "bke.v1.agent"
# The subject kind of an answer to a command the upgrader issued (`issuer="upgrader"`: upgrades,
# changed specs, etcd restores). Why apart from `result`: the dispatcher's consumer no longer
# receives (and drops) them, 15,000 deliveries and acks in a 5,000-node upgrade. An agent whose
# identity predates it answers on `result`, which the upgrader reads too (bke.adapters.auth.creds).
UPGRADER_RESULT = "upgrader-result"
HEARTBEAT_PREFIX = "bke.v1.heartbeat"  # outside the agent stream: heartbeats are not kept
OUTPUT_LIMIT = 4096  # bytes of stdout/stderr kept per step
# A command is valid for as long as the agent stream keeps it (BKE_AGENT max age, 7 days: one
# that waited there while its agent was down still runs). The agent journal keeps each result
# until a day after its command expired (agent/bke_agent/journal.py): a captured command
# replayed while valid is answered from the journal without running; after that it is refused
# as stale.
COMMAND_VALIDITY_S = 7 * 86400
CLOCK_SKEW_S = 300  # how far a node's clock may be behind the dispatcher's ("not yet valid")
AGENTS_PROVISION = "bke.v1.agents.provision"
AGENTS_REFUSED = "bke.v1.agents.refused"
AGENTS_COMMAND_KEY = "bke.v1.agents.command-key"
AGENTS_ACCEPTED = "bke.v1.agents.accepted"


def node_token(hostname: str) -> str:
    """Hostnames are DNS-1123 (no '_'), so '.' -> '_' is reversible."""
    return hostname.replace(".", "_")


def token_node(token: str) -> str:
    return token.replace("_", ".")


# How an agent asks its launcher to start it again, into the venv its record selects (an
# UpdateAgent step): EX_TEMPFAIL, "try again". Any other exit ends the launcher with that code.
RESTART_EXIT_CODE = 75

# The agent version this BKE ships: what every agent must report before an upgrade touches its node.
AGENT_VERSION = "0.1.0"


def subject_node(subject: str) -> tuple[str, str] | None:
    """(cluster, node) of `bke.v1.agent.<cluster>.<node>.<kind>`, None for any other subject."""
    head = AGENT_PREFIX + "."
    if not subject.startswith(head):
        return None
    parts = subject[len(head):].split(".")
    return (parts[0], token_node(parts[1])) if len(parts) == 3 else None


def agent_subject(cluster: str, hostname: str, kind: str) -> str:
    if kind == "heartbeat":
        return f"{HEARTBEAT_PREFIX}.{cluster}.{node_token(hostname)}"
    return f"{AGENT_PREFIX}.{cluster}.{node_token(hostname)}.{kind}"


class _Step(Message):
    id: str = Field(min_length=1, max_length=128)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    retries: int = Field(0, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0, le=300)
    # "MAJOR.MINOR": the step is for kernels older than that only; on a newer kernel (`uname -r`,
    # which the preflight reports) the agent answers Skipped without running it. For what a
    # kernel names differently (bke.core.node_kernel: nf_conntrack_ipv4 before 4.19). Left out of
    # the body when unset, as `bke.contracts.base.without_none` does for other messages (an
    # agent of the previous release forbids unknown fields), but by the field itself: a model
    # serializer here called Python for every step of every command and made pydantic build
    # the rest of the body in Python too (a 4.7 KB upgrade command's dump took 19 us, now 6 us)
    kernel_below: str | None = Field(None, pattern=r"^\d+\.\d+$", exclude_if=lambda v: v is None)


class WriteFile(_Step):
    """Write `content_b64` (clear) or `sealed_b64` (sealed to this agent) at an absolute path.
    Skipped when the file already has these bytes, mode and owner."""

    type: Literal["write_file"] = "write_file"
    path: str
    mode: int = Field(0o644, ge=0, le=0o7777)
    owner: str = "root"
    group: str = "root"
    content_b64: str | None = None
    sealed_b64: str | None = None
    sha256: str  # of the clear bytes: lets the agent skip an identical file without opening it


class RemoveFile(_Step):
    type: Literal["remove_file"] = "remove_file"
    path: str


class RunProgram(_Step):
    """argv is a list, never a shell string: no user input reaches a shell."""

    type: Literal["run"] = "run"
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = {}
    ok_exit_codes: list[int] = [0]


class SystemdUnit(_Step):
    type: Literal["systemd"] = "systemd"
    unit: str
    # mask: link the unit to /dev/null so that nothing starts it again (swap.target, see node-env)
    action: Literal["daemon-reload", "enable", "disable", "start", "stop", "restart", "enable-now", "mask"]


class RestartStaticPod(_Step):
    """Restart one static pod so that it reads its files again (a kubelet never restarts a
    static pod because a file it mounts changed). `manifest` is the pod's file under the
    kubelet's static pod directory; `health_url`, if given, is how the agent knows the old
    pod is gone before it puts the manifest back (the kubelet notices both changes)."""

    type: Literal["restart_static_pod"] = "restart_static_pod"
    manifest: str = Field(pattern=r"^/etc/kubernetes/manifests/[A-Za-z0-9][A-Za-z0-9._-]*\.yaml$")
    health_url: str | None = None


class TlsFiles(Message):
    ca: str
    cert: str
    key: str


class WaitHealth(_Step):
    """Poll a local health endpoint until it answers `expect_status` (and `expect_body`)."""

    type: Literal["wait_health"] = "wait_health"
    url: str
    tls: TlsFiles | None = None
    expect_status: int = 200
    expect_body: str | None = None


class FetchFile(_Step):
    """Download a binary from the cluster's httpRepo and verify its checksum."""

    type: Literal["fetch"] = "fetch"
    url: str
    path: str
    sha256: str
    mode: int = 0o755


class CheckHost(_Step):
    """Preflight checks of the node (like kubeadm's): each name is one check. `arch` is what the
    "arch" check expects the machine to be (the spec's node arch, Go's name); `min_kernel`
    ("MAJOR.MINOR") what "kernel-version" expects at least."""

    type: Literal["check_host"] = "check_host"
    checks: list[Literal["os", "swap-off", "ports-free", "disk", "time", "kernel-modules", "cgroup", "arch",
                         "kernel-version"]]
    ports: list[int] = []
    arch: Literal["amd64", "arm64"] | None = None
    min_kernel: str | None = Field(None, pattern=r"^\d+\.\d+$")
    # "cgroup" fails on a cgroup v1 host when set: the kubelet would refuse it (failCgroupV1
    # defaults to true from Kubernetes 1.35) and the spec did not opt out.
    require_cgroup_v2: bool = False


class NewFile(Message):
    """One file of a `ReplaceFiles` step: its bytes inline (`content_b64`, never a secret),
    sealed to the receiving agent's X25519 key (`sealed_b64`: a private key or a kubeconfig
    renewed by an upgrade, opened only in the agent's memory) or fetched from the httpRepo
    (`url`, a binary); exactly one of the three. `sha256` is of the clear bytes."""

    path: str
    mode: int = Field(0o644, ge=0, le=0o7777)
    content_b64: str | None = None
    sealed_b64: str | None = None
    url: str | None = None
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class HealthProbe(Message):
    """What `ReplaceFiles` waits for after the write: a local endpoint answering like WaitHealth."""

    url: str
    tls: TlsFiles | None = None
    expect_status: int = 200
    expect_body: str | None = None


class ReplaceFiles(_Step):
    """Replace files with a rollback (an upgrade's node step; kubeadm's static pod upgrade does
    the same for its manifests). The agent keeps each file it changes under a backup directory
    named after the command and step (a re-run of the same command keeps the first backup, never
    the new bytes), writes the new files, restarts `restart_units` (systemd, in order), then waits
    within `timeout_s` until the kubelet runs a pod of every changed static pod manifest (else
    the old pod could answer the probes) and every probe passes. If not (or a unit does not
    restart), every file comes back from the backup (a file that did not exist is removed), the
    units are restarted again, the old pods and the probes are waited for once more
    (`rollback_timeout_s`), and the step fails saying that it rolled back and whether the old
    version answers. Files that already hold these bytes are left alone; if none changes (and
    the backup of this command records no change either) and the probes pass, the step is
    `Skipped` (a success) without a restart. Downloads are checked against `sha256` before
    anything is replaced."""

    type: Literal["replace_files"] = "replace_files"
    files: list[NewFile] = Field(min_length=1)
    restart_units: list[str] = []
    probes: list[HealthProbe] = []
    rollback: bool = True
    rollback_timeout_s: float = Field(120.0, gt=0, le=3600)


# The JetStream object store that holds etcd snapshots (stream OBJ_<bucket>); agents may only add
# objects to it (bke.adapters.auth.permissions.agent_permissions), services and the operator read it.
ETCD_SNAPSHOT_BUCKET = "bke-etcd-snapshots"


class EtcdSnapshot(_Step):
    """Take a snapshot of this node's member of `etcd_cluster` and store it sealed.

    The agent asks the member at `endpoint` (its client URL, mTLS with `tls`) for a v3
    Maintenance Snapshot over etcd's gRPC gateway, keeps it in a private file, checks etcd's own
    trailing sha256, seals it to `recipient_b64` (the deployment's X25519 snapshot key, raw 32
    bytes; bke.core.secrets.snapshot_key) and adds it to the `ETCD_SNAPSHOT_BUCKET` object store as
    `object_name` with its metadata (bke.core.etcdsnap.records). The clear snapshot never leaves the
    node. An object exists once its meta message is stored, after every chunk: a run cut short
    stores nothing visible, and its re-run stores the object under the same name."""

    type: Literal["etcd_snapshot"] = "etcd_snapshot"
    timeout_s: float = Field(900.0, gt=0, le=3600)
    endpoint: str = Field(pattern=r"^https?://")
    tls: TlsFiles | None = None
    etcd_cluster: str = Field(min_length=1, max_length=63)
    member: str = Field(min_length=1, max_length=253)
    snapshot_id: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,127}$")
    object_name: str = Field(min_length=1, max_length=512)
    recipient_b64: str = Field(min_length=40, max_length=64)
    request_id: str = Field("", max_length=128)


class _EtcdMemberStep(_Step):
    """What every membership step names: the member it is about (`member`, its etcd name, which
    BKE makes the node's hostname; `peer_url`, its peer URL) and the existing member that is
    asked (`endpoint`, a client URL on the node that runs the step, mTLS with `tls`), through the
    v3 Cluster API over etcd's gRPC gateway. etcd refuses a change for a while after the previous
    one ("unhealthy cluster" until every voting member has been connected for 5 s; a learner "not
    in sync" until it caught up): the agent asks again every `poll_s` until `timeout_s`, then
    fails with etcd's last answer."""

    timeout_s: float = Field(60.0, gt=0, le=3600)
    poll_s: float = Field(1.0, gt=0, le=60)
    endpoint: str = Field(pattern=r"^https?://")
    tls: TlsFiles | None = None
    etcd_cluster: str = Field(min_length=1, max_length=63)
    member: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
    peer_url: str = Field(pattern=r"^https?://[^,\s]+$")


class EtcdMemberAdd(_EtcdMemberStep):
    """Add `member` as a learner (a non-voting member: etcd's learner design, v3.4+), so that it
    catches up without changing the quorum. Run on a healthy existing member's node, before the
    new member starts (it starts with `--initial-cluster-state=existing`). Idempotent: a member
    already listed with this peer URL (learner or voter) is `Skipped`, saying which."""

    type: Literal["etcd_member_add"] = "etcd_member_add"


class EtcdMemberPromote(_EtcdMemberStep):
    """Promote the learner `member` to a voting member once it has caught up with the leader
    (etcd refuses while it is behind: "can only promote a learner member which is in sync with
    leader"). Idempotent: a member that already votes is `Skipped`."""

    type: Literal["etcd_member_promote"] = "etcd_member_promote"
    timeout_s: float = Field(120.0, gt=0, le=3600)


class EtcdMemberRemove(_EtcdMemberStep):
    """Remove `member` (found by its name or its peer URL) from the cluster. Run on a member that
    stays. Idempotent: a member no longer listed is `Skipped`."""

    type: Literal["etcd_member_remove"] = "etcd_member_remove"


PARKED_DIR = "/etc/kubernetes/bke-restore-parked"  # static pod manifests taken away by a restore


class ParkStaticPod(_Step):
    """Stop a static pod by moving its manifest to `PARKED_DIR` (`parked`), or start it by moving
    it back (not `parked`): the kubelet runs exactly the manifests of its directory. Parking
    waits until nothing listens on `port_url`'s host and port any more (the pod is gone); a
    started pod is waited for by the WaitHealth steps that follow. Idempotent: a manifest
    already where it should be is left alone (`Skipped`)."""

    type: Literal["park_static_pod"] = "park_static_pod"
    manifest: str = Field(pattern=r"^/etc/kubernetes/manifests/[A-Za-z0-9][A-Za-z0-9._-]*\.yaml$")
    parked: bool
    port_url: str | None = Field(None, pattern=r"^https?://")


class RestoreEtcdMember(_Step):
    """Restore this node's member of `etcd_cluster` from a snapshot as a member of a new cluster
    (etcd's disaster recovery: `etcdutl snapshot restore` with the member's name, the new
    cluster's members, a new token and its peer URL, into a new data dir). The agent fetches the
    snapshot piece by piece from the upgrader (bke.contracts.restore.GetRestorePiece, sealed to
    this agent's key), checks it against `sha256` (this signed command's) and etcd's own hash,
    moves `data_dir` aside to `aside_dir` (kept, never deleted) and restores; the clear file is
    removed whatever happens. The argv is the agent's own: the command carries values only."""

    type: Literal["restore_etcd_member"] = "restore_etcd_member"
    timeout_s: float = Field(900.0, gt=0, le=3600)
    restore_id: str = Field(min_length=1, max_length=200)
    etcd_cluster: str = Field(min_length=1, max_length=63)
    member: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9.-]*$")
    initial_cluster: str = Field(min_length=1, max_length=4096, pattern=r"^[A-Za-z0-9.-]+=https?://[^,\s]+(,[A-Za-z0-9.-]+=https?://[^,\s]+)*$")
    token: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    peer_url: str = Field(pattern=r"^https?://[^,\s]+$")
    data_dir: str = Field(pattern=r"^/var/lib/etcd[A-Za-z0-9._-]*$")
    aside_dir: str = Field(pattern=r"^/var/lib/etcd[A-Za-z0-9._-]*$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class LeaveEtcdMember(_Step):
    """Take away this node's member of an etcd cluster that has removed it already (an
    EtcdMemberRemove on a member that stays, in an earlier step): its static pod's manifest is
    removed, its pod waited gone, then its data directory removed, so that the node can join that
    cluster again later as a new member (etcd refuses a removed member's data). kubeadm's reset
    does the same for a local member: its remove-etcd-member phase, then cleanup-node removes
    /var/lib/etcd (cmd/kubeadm/app/cmd/phases/reset). BKE keeps the cluster's snapshot, taken
    before its membership changed, in its own store. Idempotent: an absent manifest or data
    directory is fine (`Skipped` when both are)."""

    type: Literal["leave_etcd_member"] = "leave_etcd_member"
    timeout_s: float = Field(120.0, gt=0, le=3600)
    manifest: str = Field(pattern=r"^/etc/kubernetes/manifests/[A-Za-z0-9][A-Za-z0-9._-]*\.yaml$")
    # as ResetNode's: the host agent's reset allow-list decides which directories it removes
    data_dir: str = Field(pattern=r"^/[A-Za-z0-9._/-]+$")


class AgentWheel(Message):
    """One wheel of an agent release, from the deployment's bundle (`<httpRepo>/agent/<version>/
    wheels/`, `bke bundle build`): a URL or an absolute path on the node, and its sha256."""

    url: str = Field(min_length=1, max_length=2048)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class UpdateAgent(_Step):
    """Install agent `version` beside the running one and restart into it (the upgrade's
    `agents` step). The agent downloads every wheel, checks each sha256, makes a new virtualenv
    beside its own (the old one stays, for a rollback), installs the wheels there with no
    package index, records the new venv as on trial, and exits with RESTART_EXIT_CODE without
    answering: its launcher starts the new venv, which answers the same command (the step is
    then `Skipped`: it runs `version`). The launcher, old code that never runs the new one, puts
    the old venv back when the new agent has not confirmed within `confirm_timeout_s` (or
    exits first); the old agent then fails this step saying so. Only an agent started by its
    launcher takes this step."""

    type: Literal["update_agent"] = "update_agent"
    timeout_s: float = Field(900.0, gt=0, le=3600)
    version: str = Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+([.+-][0-9A-Za-z.+-]+)?$")
    wheels: list[AgentWheel] = Field(min_length=1, max_length=200)
    confirm_timeout_s: float = Field(120.0, gt=0, le=3600)


class ResetNode(_Step):
    """Undo what BKE did to this node (a cluster reset or delete; kubeadm's `reset` cleanup-node
    phase does the same for what kubeadm wrote): take the static pod manifests away and wait for
    their pods to stop, stop the kubelet, then remove what BKE wrote (the agent's reset table,
    agent/bke_agent/reset.py) and the data directories of this node's etcd members. Absent
    things are fine: a re-run after a crash finishes the job. `binaries`: also the binaries and
    units BKE installed, and containerd is stopped (a delete; a reset keeps them for a re-install)."""

    type: Literal["reset_node"] = "reset_node"
    timeout_s: float = Field(300.0, gt=0, le=3600)
    etcd_data_dirs: list[Annotated[str, Field(pattern=r"^/[A-Za-z0-9._/-]+$")]] = Field(default_factory=list, max_length=3)
    binaries: bool = False


# the phase of a command that carries a TrustCommandKey step, and the only one that may
COMMAND_KEY_PHASE = "command-key"


class TrustCommandKey(_Step):
    """Change the command keys this agent trusts (a rollover of the command-signing key,
    bke.core.secrets.command_keyring): from now on `publicLine` is trusted, and the key that
    signed this very command stays trusted until `signerNotAfter` (ISO 8601, UTC), then is
    refused; every other key is dropped. Signed by the current key, it announces the next one
    (the overlap); signed by `publicLine` itself, it retires every other key at once. A key's
    end can only move earlier: a later `signerNotAfter` than the one the agent holds is not
    taken. Only in a command of phase `command-key` (COMMAND_KEY_PHASE); the agent writes its keyring file
    before it answers."""

    type: Literal["trust_command_key"] = "trust_command_key"
    timeout_s: float = Field(10.0, gt=0, le=3600)
    public_line: str = Field(pattern=r"^bke-command-ed25519 [A-Za-z0-9+/]{43}=$")
    signer_not_after: str = Field(min_length=1, max_length=64)


Step = Annotated[
    Union[WriteFile, RemoveFile, RunProgram, SystemdUnit, WaitHealth, FetchFile, CheckHost, RestartStaticPod,
          ReplaceFiles, EtcdSnapshot, ParkStaticPod, RestoreEtcdMember, UpdateAgent, ResetNode, EtcdMemberAdd,
          EtcdMemberPromote, EtcdMemberRemove, LeaveEtcdMember, TrustCommandKey],
    Field(discriminator="type"),
]


class AgentCommand(Message):
    """Signed by the dispatcher (`signature_b64` over `signing_bytes()`, key `key_id`); valid
    from `issued_at` to `expires_at` (ISO 8601, UTC).

    Bound to its receiver (bke.core.secrets.binding): `agent_id` is the fingerprint of the receiving
    agent's provisioned key, `incarnation` the cluster's, both signed. Left out of the body when
    unset (an unbound command, for an agent of the previous release, which forbids unknown
    fields), as `kernel_below` is."""

    command_id: str = Field(min_length=1, max_length=256)
    cluster: str
    node: str
    phase: str
    issued_at: str
    steps: list[Step]
    issuer: str = "dispatcher"
    expires_at: str = ""
    key_id: str = ""
    agent_id: str | None = Field(None, min_length=1, max_length=128, exclude_if=lambda v: v is None)
    incarnation: str | None = Field(None, pattern=r"^(\d{8}T\d{12}Z-[0-9a-f]{16})?$",
                                    exclude_if=lambda v: v is None)
    signature_b64: str = ""

    def signing_bytes(self) -> bytes:
        """The canonical bytes that are signed: deterministic JSON (sorted keys, no spaces) of
        the wire form without the signature. Any changed field changes these bytes."""
        doc = self.model_dump(mode="json", by_alias=True, exclude={"signature_b64"})
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class StepResult(Message):
    id: str
    status: StepResultStatus
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    attempts: int = 1
    duration_s: float = 0.0


class CommandResult(Message):
    """`incarnation`: the cluster incarnation of the command it answers (its signed
    `incarnation`; a replay answered from the journal says the stored command's): a cluster made
    again under its name reuses command ids, and its dispatcher and upgrader drop an answer to
    the deleted cluster's command (bke.core.secrets.binding.result_refusal). None for an unbound
    command, and then left out of the body, as AgentCommand's binding is: only a signer that
    binds reads it."""

    command_id: str
    cluster: str
    node: str
    agent_id: str  # identity: fingerprint of the agent's public key
    status: FinishedStatus
    steps: list[StepResult]
    started_at: str
    finished_at: str
    replayed: bool = False  # True: the stored result of an already completed command
    agent_version: str = ""  # the answering agent's version (the upgrade's agents step checks it)
    incarnation: str | None = Field(None, pattern=r"^(\d{8}T\d{12}Z-[0-9a-f]{16})?$", exclude_if=lambda v: v is None)


class AgentRegistered(Message):
    cluster: str
    node: str
    agent_id: str
    seal_public_key_b64: str  # X25519, raw 32 bytes, base64
    backend: Literal["host", "lab"]
    version: str
    at: str
    # "sha256:<hex>" of the cluster CA the node already holds (bke.core.secrets.fingerprint), None if
    # none: the certs service never seals a bundle of another CA to it (state lost or replaced)
    ca_fingerprint: str | None = None


class CommandRefused(Message):
    """Event: the agent would not run a command (bad or missing signature, another node or
    cluster, another agent key or an older incarnation of the cluster, expired, not yet valid).
    Nothing ran; the reason is the agent's own check."""

    cluster: str
    node: str
    agent_id: str
    command_id: str = Field("", max_length=256)  # "" when the bytes were no command at all
    reason: str = Field(max_length=500)
    at: str


class ProvisionAgent(Message):
    """Request (operator only): record the key BKE made for this node's agent. Only a
    registration with this key is ever sealed to."""

    cluster: str = Field(min_length=1, max_length=63)
    node: str = Field(min_length=1, max_length=253)
    agent_id: str = Field(min_length=1, max_length=128)
    seal_public_key_b64: str = Field(min_length=1, max_length=128)
    at: str = ""


class AgentProvisioned(Message):
    """Reply to ProvisionAgent: `ok`, or the reason it was not recorded."""

    cluster: str
    node: str
    ok: bool
    reason: str = ""


class GetCommandKey(Message):
    """Request: the dispatcher's command-signing public key, to provision an agent with."""

    purpose: str = "provision"


class CommandKey(Message):
    """Reply: `publicLine` is what an agent is given (BKE_AGENT_COMMAND_KEY)."""

    public_line: str
    key_id: str


class AgentAccepted(Message):
    """Event: a registration's key is the one provisioned for its node: from now on this agent
    is the node's (the dispatcher believes that node's results only from `agent_id`)."""

    cluster: str
    node: str
    agent_id: str
    at: str


class AgentRefused(Message):
    """Event: a registration was refused (its key is not the one BKE provisioned for the node,
    or none was); nothing was sealed to it."""

    cluster: str
    node: str
    agent_id: str
    reason: str
    at: str


class AgentRuntime(Message):
    """What an agent runs and runs on: its version, and the Python and platform an update's
    wheels must install on. The upgrader gives each node only the wheels whose tags pip would
    accept there (bke_upgrader.wheel_tags: PEP 425 tags, manylinux by glibc version (PEP 600),
    musllinux by musl version (PEP 656)), so a node downloads only what it installs."""

    agent_version: str = Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+([.+-][0-9A-Za-z.+-]+)?$", max_length=64)
    python: str = Field(pattern=r"^[0-9]\.[0-9]{1,2}$")  # major.minor of the agent's interpreter
    implementation: str = Field("cpython", pattern=r"^[a-z0-9_]{1,32}$")  # sys.implementation.name
    machine: str = Field(pattern=r"^[A-Za-z0-9_]{1,32}$")  # platform.machine(): x86_64, aarch64, ...
    # the C library the interpreter links: "glibc" / "musl" and its major.minor; "" when not known
    # (then only the wheels tagged for any Linux of that arch, or pure, are compatible)
    libc: Literal["glibc", "musl", ""] = ""
    libc_version: str = Field("", pattern=r"^([0-9]{1,3}\.[0-9]{1,3})?$")
    # the form of command binding the agent checks (bke.core.secrets.binding.COMMAND_BINDING); 0: an
    # agent older than binding, which is sent unbound commands
    command_binding: int = Field(0, ge=0, le=1000)


class AgentHeartbeat(Message):
    """Fields after `running_command` came later and are optional, so that a heartbeat of an
    older agent still reads (the body's form is unchanged: MESSAGE_SCHEMA stays)."""

    cluster: str
    node: str
    agent_id: str
    at: str
    running_command: str | None = None
    # the host's cgroup version as the agent sees it (2: a cgroup2 filesystem at /sys/fs/cgroup;
    # the upgrader's CgroupV2 check); None: not known (an older agent, a lab node)
    cgroup_version: Literal[1, 2] | None = None
    # the agent's version, Python and platform (the upgrade's agents step picks the wheels of an
    # update for it); None: an agent older than this field (the agents step cannot update it)
    runtime: AgentRuntime | None = None
