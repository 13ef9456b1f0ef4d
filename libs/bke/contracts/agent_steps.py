"""The steps of an agent's command: each a typed, idempotent piece of work on one node, picked by
its `type` (the `Step` union). The command that carries them, its signature and its result are
bke.contracts.agent's; what an agent may do for each kind of command is bke.core.host_actions'.
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from .base import Message

__all__ = [
    "AgentWheel",
    "COMMAND_KEY_PHASE",
    "CheckHost",
    "ETCD_SNAPSHOT_BUCKET",
    "EtcdMemberAdd",
    "EtcdMemberPromote",
    "EtcdMemberRemove",
    "EtcdSnapshot",
    "FetchFile",
    "HealthProbe",
    "LeaveEtcdMember",
    "NewFile",
    "PARKED_DIR",
    "ParkStaticPod",
    "RemoveFile",
    "ReplaceFiles",
    "ResetNode",
    "RestartStaticPod",
    "RestoreEtcdMember",
    "RunProgram",
    "Step",
    "SystemdUnit",
    "TlsFiles",
    "TrustCommandKey",
    "UpdateAgent",
    "WaitHealth",
    "WriteFile",
]


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
