"""Every subject on the bus, versioned, with its message model and direction.

Commands are imperative, events past tense. The AsyncAPI document is generated from
`CHANNELS` (see `bke.contracts.asyncapi`), so it cannot drift from the code.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import Message
from .cluster import ClusterRejected, InstallCluster, PlanCreated
from .apply import APPLY_ACCEPTED, APPLY_CLUSTER, APPLY_REJECTED, ApplyAccepted, ApplyCluster, ApplyRejected
from .changes import CLUSTER_DIFF, ClusterChanges, DiffCluster
from .pause import PAUSE_CLUSTER, PauseChanged, PauseCluster
from .certs import (
    CERTS_FAILED,
    CERTS_ISSUED,
    CERTS_RENEWED,
    CERTS_SEALED,
    ISSUE_CERTS,
    RENEW_CERTS,
    CertsFailed,
    CertsIssued,
    CertsRenewed,
    CertsSealed,
    IssueCerts,
    RenewCerts,
)
from .rotation import RotationChanged
from .restore import (
    RESTORE_ACCEPTED,
    RESTORE_ETCD,
    RESTORE_GET,
    RESTORE_PIECE,
    RESTORE_REJECTED,
    EtcdRestoreAccepted,
    EtcdRestoreChanged,
    EtcdRestoreRejected,
    EtcdRestoreView,
    GetEtcdRestore,
    GetRestorePiece,
    RestoreEtcd,
    RestorePiece,
)
from .reset import (
    CLUSTER_DELETED,
    RESET_ACCEPTED,
    RESET_CLUSTER,
    RESET_REJECTED,
    ClusterDeleted,
    ResetAccepted,
    ResetChanged,
    ResetCluster,
    ResetRejected,
    StateRemoved,
)
from .membership import (
    JOIN_NODES,
    JOIN_NODES_FINISHED,
    REMOVE_NODES,
    REMOVE_NODES_FINISHED,
    JoinNodes,
    JoinNodesChanged,
    JoinNodesFinished,
    RemoveNodes,
    RemoveNodesChanged,
    RemoveNodesFinished,
)
from .upgrade import (
    UPGRADE_ACCEPTED,
    UPGRADE_CLUSTER,
    UPGRADE_GET,
    RETRY_UPGRADE,
    RetryUpgrade,
    UPGRADE_REJECTED,
    GetUpgrade,
    UpgradeAccepted,
    UpgradeChanged,
    UpgradeCluster,
    UpgradeRejected,
    UpgradeView,
)
from .install import RETRY_INSTALL, InstallFinished, NodeStepChanged, PhaseChanged, RetryInstall
from .render import MANIFESTS_RENDERED, RENDER_FAILED, RENDER_MANIFESTS, ManifestsRendered, RenderFailed, RenderManifests
from .agent import (
    AGENTS_ACCEPTED,
    AGENTS_COMMAND_KEY,
    AGENTS_PROVISION,
    AGENTS_REFUSED,
    UPGRADER_RESULT,
    AgentAccepted,
    AgentCommand,
    AgentHeartbeat,
    AgentProvisioned,
    AgentRefused,
    AgentRegistered,
    CommandKey,
    CommandRefused,
    GetCommandKey,
    CommandResult,
    ProvisionAgent,
)
from .deadletter import AGENTS_FLOODING, AgentFlooding, DeadLettered
from .node_commands import NODE_COMMANDS_ANSWERED, NODE_COMMANDS_SEND, NodeCommandsAnswered, SendNodeCommands
from .identity import AGENT_IDENTITY_RENEW, AgentIdentityRenewed, RenewAgentIdentity
from .health import GetHealth, ServiceHealth
from .expiration import EXPIRATION_GET, CertExpiration, GetExpiration
from .status import STATUS_GET, ClusterStatus, StatusError, GetStatus

__all__ = [
    "AGENT_COMMAND_SUBJECTS",
    "AGENT_OUTPUT_SUBJECTS",
    "CHANNELS",
    "CLUSTER_REJECTED",
    "INSTALL_CLUSTER",
    "COMMAND_SUBJECTS",
    "Channel",
    "DEADLETTER",
    "EVENT_SUBJECTS",
    "LEGACY_CLUSTER_REQUESTED",
    "LEGACY_COMMANDS",
    "LEGACY_RETRY_REQUESTED",
    "PLAN_CREATED",
]

INSTALL_CLUSTER = "bke.v1.cluster.install"
CLUSTER_REJECTED = "bke.v1.cluster.rejected"
PLAN_CREATED = "bke.v1.plan.created"
DEADLETTER = "bke.v1.deadletter"

# Commands are imperative: two subjects of earlier releases were named like events. They stay
# accepted, each by the service that handles its new name, with a warning per message, until
# bke.v2: older CLIs and tooling keep working, and commands queued across a rolling upgrade are
# not lost. Nothing in BKE publishes them any more.
LEGACY_CLUSTER_REQUESTED = "bke.v1.cluster.requested"  # now INSTALL_CLUSTER
LEGACY_RETRY_REQUESTED = "bke.v1.cluster.retry-requested"  # now RETRY_INSTALL
LEGACY_COMMANDS: dict[str, str] = {LEGACY_CLUSTER_REQUESTED: INSTALL_CLUSTER, LEGACY_RETRY_REQUESTED: RETRY_INSTALL}

# Stream membership. Subjects of one stream may not overlap another's, so events are
# listed one by one (the `bke.v1.cluster.*` commands and the rejection sit in two streams).
COMMAND_SUBJECTS: tuple[str, ...] = (INSTALL_CLUSTER, RENEW_CERTS, RETRY_INSTALL, RENDER_MANIFESTS, ISSUE_CERTS,
                                     UPGRADE_CLUSTER, RESTORE_ETCD, RETRY_UPGRADE, RESET_CLUSTER, JOIN_NODES, REMOVE_NODES,
                                     APPLY_CLUSTER,
                                     # the upgrader's node commands to the dispatcher, and the
                                     # agents' answers the dispatcher sends on to it: for one
                                     # service each, taken once (a work queue)
                                     NODE_COMMANDS_SEND, NODE_COMMANDS_ANSWERED,
                                     *LEGACY_COMMANDS)
EVENT_SUBJECTS: tuple[str, ...] = (
    CLUSTER_REJECTED,
    PLAN_CREATED,
    CERTS_ISSUED,
    CERTS_RENEWED,
    CERTS_FAILED,
    CERTS_SEALED,
    MANIFESTS_RENDERED,
    RENDER_FAILED,
    AGENTS_REFUSED,
    AGENTS_ACCEPTED,
    AGENTS_FLOODING,
    # Phase changes and the end of an install are kept. Per-node step changes (~30,000 at 5,000
    # nodes) are not: they are live progress for whoever listens (the CLI, a dashboard), the
    # dispatcher's Redis state holds every node's status, and storing them doubled the writes
    # JetStream makes during an install.
    "bke.v1.install.*.phase",
    "bke.v1.install.*.finished",
    # Rotation transitions are few (one per node) and the certs service must not miss the end.
    "bke.v1.rotation.*.changed",
    # An upgrade's answer and its transitions (a step or a batch moved on): a few per batch.
    UPGRADE_ACCEPTED,
    UPGRADE_REJECTED,
    "bke.v1.upgrade.*.changed",
    # A changed spec's answer (its run's transitions are the upgrade's, above).
    APPLY_ACCEPTED,
    APPLY_REJECTED,
    # A pause or resume recorded, one per operation-running service (the CLI waits for both).
    "bke.v1.pause.*.changed",
    # The pause command itself goes to two services (dispatcher, upgrader), each with its own
    # durable: a work-queue stream allows one consumer per subject, so it is kept here.
    PAUSE_CLUSTER,
    # A restore's answer and its transitions: a few per stage.
    RESTORE_ACCEPTED,
    RESTORE_REJECTED,
    "bke.v1.etcd-restore.*.changed",
    # A reset's answer and its transitions (snapshots, a rank of nodes, the end), the end of a
    # delete, and each service's answer to it (the CLI waits for all five).
    RESET_ACCEPTED,
    RESET_REJECTED,
    "bke.v1.reset.*.changed",
    CLUSTER_DELETED,
    "bke.v1.delete.*.removed",
    # Workers joined or removed: the end, and the transitions (a phase or stage per node).
    JOIN_NODES_FINISHED,
    "bke.v1.join-nodes.*.changed",
    REMOVE_NODES_FINISHED,
    "bke.v1.remove-nodes.*.changed",
)
# The agents' subjects, in two streams: what the dispatcher and the upgrader send to a node, and
# what a node's agent sends back (read by the dispatcher alone, but for registrations) (bke.adapters.bus.streams says why they are apart). A node's
# agent may publish only its own output subjects (bke.adapters.auth.permissions).
AGENT_COMMAND_SUBJECTS: tuple[str, ...] = ("bke.v1.agent.*.*.command",)
AGENT_OUTPUT_SUBJECTS: tuple[str, ...] = tuple(f"bke.v1.agent.*.*.{kind}"
                                               for kind in ("result", UPGRADER_RESULT, "registered", "refused"))


@dataclass(frozen=True)
class Channel:
    subject: str
    model: type[Message]
    kind: str  # "command" | "event" | "request" (core NATS request/reply, not stored)
    summary: str
    senders: tuple[str, ...]
    receivers: tuple[str, ...]
    replies: tuple[type[Message], ...] = ()  # a request's possible replies
    # Why a route has no sender or no receiver among BKE's components (an operator's tool, say);
    # empty for every internal route. tests/contract/test_channel_routes.py holds the code to it.
    external: str = ""
    # A request that changes nothing (a status, a view, a dry run): what a read-only identity (a
    # dashboard) may send (bke.adapters.auth.permissions).
    reads: bool = False


CHANNELS: tuple[Channel, ...] = (
    Channel(INSTALL_CLUSTER, InstallCluster, "command", "Plan and install a cluster from a BKECluster + BKENode spec.", ("cli",), ("planner",)),
    Channel(CLUSTER_REJECTED, ClusterRejected, "event", "A request was refused; every error names its field.", ("planner",), ("cli",)),
    Channel(PLAN_CREATED, PlanCreated, "event", "A placement plan is stored; read by certs, renderer and dispatcher (and by the CLI that asked for it).", ("planner",), ("certs", "renderer", "dispatcher", "cli")),
    Channel(CERTS_ISSUED, CertsIssued, "event", "The cluster PKI is ensured for a plan (references, never keys); the upgrader reads the answer to a changed spec's re-issue.", ("certs",), ("dispatcher", "upgrader")),
    Channel(CERTS_FAILED, CertsFailed, "event", "The PKI could not be ensured, or one node's bundle could not be sealed (the install fails with this reason), or a renewal was refused or failed.", ("certs",), ("dispatcher", "cli", "upgrader")),
    Channel(CERTS_SEALED, CertsSealed, "event", "These nodes' bundles are sealed to their agents and stored.", ("certs",), ("dispatcher",)),
    Channel(ISSUE_CERTS, IssueCerts, "command", "Ensure the PKI and seal every agent's bundle again (a retry after a certificates failure, a join, a changed spec whose certificate names change).", ("dispatcher", "upgrader"), ("certs",)),
    Channel(RENEW_CERTS, RenewCerts, "command", "Renew leaf certificates: by name, all, or those expiring within N days (the certs service's automatic renewal sends it too; the upgrader, for the components it upgrades).", ("cli", "certs", "upgrader"), ("certs",)),
    Channel(CERTS_RENEWED, CertsRenewed, "event", "A renewal request's certificates were renewed and re-sealed: one event listing each with its nodes; the dispatcher rotates them onto the nodes (the upgrader delivers those of its own renewal, origin upgrade).", ("certs",), ("dispatcher", "cli", "upgrader")),
    Channel("bke.v1.rotation.{cluster}.changed", RotationChanged, "event", "A certificate rotation started, moved one node on, or finished (the whole view each time).", ("dispatcher",), ("cli", "certs")),
    Channel(MANIFESTS_RENDERED, ManifestsRendered, "event", "Every node's files are rendered, validated and stored.", ("renderer",), ("dispatcher",)),
    Channel(RENDER_FAILED, RenderFailed, "event", "Rendering a plan failed (unsupported version, refused flag, invalid output); the install fails with this reason.", ("renderer",), ("dispatcher",)),
    Channel(RENDER_MANIFESTS, RenderManifests, "command", "Render the stored plan again (a retry after a rendering failure; after an upgrade, its new plan).", ("dispatcher", "upgrader"), ("renderer",)),
    Channel("bke.v1.install.{cluster}.phase", PhaseChanged, "event", "An install phase changed status.", ("dispatcher",), ("cli",)),
    Channel("bke.v1.install.{cluster}.node", NodeStepChanged, "event", "A node's command in a phase changed status (live only: not kept in a stream; Redis holds every node's status).", ("dispatcher",), (),
            external="live progress for whoever watches (`nats sub`, a dashboard); the CLI reads phases and status instead"),
    Channel("bke.v1.install.{cluster}.finished", InstallFinished, "event", "The install succeeded or failed (phase, node, reason, kind, whether any node changed).", ("dispatcher",), ("cli", "planner", "certs")),
    Channel(RETRY_INSTALL, RetryInstall, "command", "Retry the failed phase of an install (some or all failed nodes).", ("cli",), ("dispatcher",)),
    Channel(UPGRADE_CLUSTER, UpgradeCluster, "command", "Upgrade a cluster to new versions (or, with dryRun, only answer with the plan and the checks' findings).", ("cli",), ("upgrader",)),
    Channel(RETRY_UPGRADE, RetryUpgrade, "command", "Complete the cluster's last upgrade on nodes it left behind (left out, failed, rolled back, not reached); answered like an upgrade request.", ("cli",), ("upgrader",)),
    Channel(UPGRADE_ACCEPTED, UpgradeAccepted, "event", "An upgrade request passed its checks: the steps it runs, every finding, the nodes left out.", ("upgrader",), ("cli",)),
    Channel(UPGRADE_REJECTED, UpgradeRejected, "event", "An upgrade request was refused: every refusing finding by check name (a malformed request: its field).", ("upgrader",), ("cli",)),
    Channel("bke.v1.upgrade.{cluster}.changed", UpgradeChanged, "event", "An upgrade (or the run of a changed spec, bke.v1.cluster.apply) started, moved a step or batch on, rolled a node back, or finished (the whole view each time).", ("upgrader",), ("cli",)),
    Channel(APPLY_CLUSTER, ApplyCluster, "command", "Carry out a changed spec on a running cluster (rolls, labels and taints, addons), or with dryRun only answer the actions it would take; its run is followed on the upgrade's changed subject.", ("cli",), ("upgrader",)),
    Channel(APPLY_ACCEPTED, ApplyAccepted, "event", "A changed spec was accepted: the per-node actions in order and the steps of its run.", ("upgrader",), ("cli",)),
    Channel(APPLY_REJECTED, ApplyRejected, "event", "A changed spec was refused: every refusal by rule name (a change this build cannot carry out names its kind; a malformed request: its field).", ("upgrader",), ("cli",)),
    Channel(UPGRADE_GET, GetUpgrade, "request", "The cluster's current or last upgrade, served by the upgrader (queue group upgrader-get; core NATS, not stored).", ("cli",), ("upgrader",), (UpgradeView, StatusError), reads=True),
    Channel(RESTORE_ETCD, RestoreEtcd, "command", "Restore one etcd cluster from a stored snapshot (disaster recovery, asked for by a person; with dryRun, only answer what it would stop and do).", ("cli",), ("upgrader",)),
    Channel(RESTORE_ACCEPTED, EtcdRestoreAccepted, "event", "A restore request was accepted (or, dry run, would be): every pod it stops and every stage.", ("upgrader",), ("cli",)),
    Channel(RESTORE_REJECTED, EtcdRestoreRejected, "event", "A restore request was refused, with the reason (another operation runs, no such snapshot or etcd cluster, a snapshot not from the node's provisioned agent).", ("upgrader",), ("cli",)),
    Channel("bke.v1.etcd-restore.{cluster}.changed", EtcdRestoreChanged, "event", "A restore started, moved a stage or node on, or finished (the whole view each time).", ("upgrader",), ("cli",)),
    Channel(RESTORE_GET, GetEtcdRestore, "request", "The cluster's current or last etcd restore, served by the upgrader (queue group upgrader-get; core NATS, not stored): `bke etcd restore status`.", ("cli",), ("upgrader",), (EtcdRestoreView, StatusError), reads=True),
    Channel(RESTORE_PIECE, GetRestorePiece, "request", "A member's agent asks for the next piece of the snapshot it restores, re-sealed to its provisioned key (core NATS, not stored).", ("agent",), ("upgrader",), (RestorePiece, StatusError)),
    Channel("bke.v1.agent.{cluster}.{node}.command", AgentCommand, "command", "Steps for one node's agent, signed by the dispatcher (the upgrader's too, sent through it); secret files sealed to that agent.", ("dispatcher",), ("agent",)),
    Channel(NODE_COMMANDS_SEND, SendNodeCommands, "command", "A batch of node commands of an operation the upgrader runs (an upgrade, a changed spec, an etcd restore), unsigned: the dispatcher binds, signs and sends each to its node's agent.", ("upgrader",), ("dispatcher",)),
    Channel("bke.v1.agent.{cluster}.{node}.result", CommandResult, "event", "The agent ran (or replayed) a command; it echoes the command's operation, by which the dispatcher routes the answer.", ("agent",), ("dispatcher",)),
    Channel("bke.v1.agent.{cluster}.{node}.upgrader-result", CommandResult, "event",
            "Deprecated: where agents of the previous release answer the upgrader's commands; read by the dispatcher like result, until bke.v2.",
            ("agent",), ("dispatcher",)),
    Channel(NODE_COMMANDS_ANSWERED, NodeCommandsAnswered, "event", "Agents' believed answers to commands of the operations the upgrader runs (an upgrade, a changed spec, an etcd restore), each with the operation it answers; those the dispatcher believed together in one message (commands' stream: taken by one upgrader replica).", ("dispatcher",), ("upgrader",)),
    Channel("bke.v1.agent.{cluster}.{node}.registered", AgentRegistered, "event", "An agent started and announces its public keys (sealed to only if they are the ones provisioned).", ("agent",), ("certs",)),
    Channel("bke.v1.agent.{cluster}.{node}.refused", CommandRefused, "event", "The agent refused a command (unsigned, not the dispatcher's key, another node, expired or not yet valid); nothing ran.", ("agent",), ("dispatcher",)),
    Channel(AGENTS_PROVISION, ProvisionAgent, "request", "Record the key BKE made for a node's agent at provisioning (operator only; queue group certs-provision; core NATS, not stored).", ("cli",), ("certs",), (AgentProvisioned,)),
    Channel(AGENT_IDENTITY_RENEW, RenewAgentIdentity, "request", "A node's agent asks, in the last third of its JWT's life and signed with its own nkey, for a new JWT for the same key; the owner of the NATS authority answers (queue group renewer; core NATS, not stored). A revoked identity, another node's request or another key is refused.", ("agent",), ("renewer",), (AgentIdentityRenewed,)),
    Channel(AGENTS_COMMAND_KEY, GetCommandKey, "request", "The dispatcher's command-signing public key, given to agents at provisioning (queue group dispatcher-command-key; core NATS, not stored).", ("cli",), ("dispatcher",), (CommandKey,)),
    Channel(AGENTS_ACCEPTED, AgentAccepted, "event", "A registration's key is the one provisioned for its node: the node's results are believed only from this agent.", ("certs",), ("dispatcher",)),
    Channel(AGENTS_REFUSED, AgentRefused, "event", "A registration's key is not the one provisioned for its node (or none was): nothing was sealed to it.", ("certs",), ("dispatcher",)),
    Channel(AGENTS_FLOODING, AgentFlooding, "event", "A node's agent sent more outputs that answer no command in flight (or are no message) within a window than a working agent does: counts only, one per node and window; the dead-letter stream holds one summary of it, never the payloads.", ("dispatcher", "certs", "upgrader"), (),
            external="heard by dashboards (they may hear every event) and operators' tools (`nats sub bke.v1.agents.flooding`); `bke deadletters list` shows its summary"),
    Channel("bke.v1.heartbeat.{cluster}.{node}", AgentHeartbeat, "event", "Agent liveness (core NATS, not stored).", ("agent",), ("dispatcher",)),
    Channel(EXPIRATION_GET, GetExpiration, "request", "The expiry of a cluster's certificates, paged, served by the certs service (queue group certs-expiration; core NATS, not stored); the upgrader asks it before an upgrade.", ("cli", "upgrader"), ("certs",), (CertExpiration, StatusError), reads=True),
    Channel(PAUSE_CLUSTER, PauseCluster, "command", "Pause (or resume) a cluster's operations: the install, rotation or upgrade running finishes its step and takes no new one until resumed.", ("cli",), ("dispatcher", "upgrader")),
    Channel("bke.v1.pause.{cluster}.changed", PauseChanged, "event", "A service recorded a pause or a resume (one event per service that runs operations).", ("dispatcher", "upgrader"), ("cli",)),
    Channel(RESET_CLUSTER, ResetCluster, "command", "Reset a cluster's nodes (all, or those named) or delete the cluster: etcd snapshots first, then the nodes, workers first and etcd members last.", ("cli",), ("dispatcher",)),
    Channel(RESET_ACCEPTED, ResetAccepted, "event", "A reset or delete started (the nodes in the order they are reset).", ("dispatcher",), ("cli",)),
    Channel(RESET_REJECTED, ResetRejected, "event", "A reset or delete was refused: another operation runs, the cluster is paused or unknown, a node is not in the plan.", ("dispatcher",), ("cli",)),
    Channel("bke.v1.reset.{cluster}.changed", ResetChanged, "event", "A reset's snapshots or nodes moved on, or it finished (the whole view each time).", ("dispatcher",), ("cli",)),
    Channel(CLUSTER_DELETED, ClusterDeleted, "event", "Every node of a deleted cluster is reset: each service removes its own records of it.", ("dispatcher",), ("planner", "certs", "renderer", "dispatcher", "upgrader")),
    Channel("bke.v1.delete.{cluster}.removed", StateRemoved, "event", "A service removed its records of a deleted cluster (one event per service).", ("planner", "certs", "renderer", "dispatcher", "upgrader"), ("cli",)),
    Channel(JOIN_NODES, JoinNodes, "command", "Join workers that the stored plan (digest planDigest) already names: their certificates issued and sealed, their files rendered, then the install's per-node phases on those nodes only.", ("cli", "upgrader"), ("dispatcher",)),
    Channel(JOIN_NODES_FINISHED, JoinNodesFinished, "event", "A join ended (Succeeded or Failed, each node's outcome); a refused join is Failed with the reason.", ("dispatcher",), ("cli", "upgrader")),
    Channel("bke.v1.join-nodes.{cluster}.changed", JoinNodesChanged, "event", "A join moved a node to its next phase, or waits, or ended (the whole view each time).", ("dispatcher",), ("cli",)),
    Channel(REMOVE_NODES, RemoveNodes, "command", "Remove workers: cordon and drain, delete the Node, reset the node, forget it (etcd members and masters refused, named).", ("cli", "upgrader"), ("dispatcher",)),
    Channel(REMOVE_NODES_FINISHED, RemoveNodesFinished, "event", "A removal ended (Succeeded or Failed, each node's outcome, the agents' identities to revoke); a refused one is Failed with the reason. The certs service forgets the removed nodes' agent keys, sealed bundles and PKI instances, the renderer their rendered files.", ("dispatcher",), ("cli", "upgrader", "certs", "renderer")),
    Channel("bke.v1.remove-nodes.{cluster}.changed", RemoveNodesChanged, "event", "A removal moved a node to its next stage, or ended (the whole view each time).", ("dispatcher",), ("cli",)),
    Channel(CLUSTER_DIFF, DiffCluster, "request", "What applying this spec to the running cluster would change, or why it is refused, answered by the planner from the stored plan (queue group planner-diff; core NATS, not stored; changes nothing): bke apply --dry-run.", ("cli",), ("planner",), (ClusterChanges, StatusError), reads=True),
    Channel(STATUS_GET, GetStatus, "request", "The status of a cluster's install, served by the dispatcher (queue group dispatcher-status; core NATS, not stored); the upgrader asks it before an upgrade, the planner for a dry run's etcd health.", ("cli", "upgrader", "planner"), ("dispatcher",), (ClusterStatus, StatusError), reads=True),
    Channel("bke.v1.health.{service}", GetHealth, "request", "Whether a service is ready (NATS connected, Redis reachable, streams declared) and why not (core NATS, not stored).", (), ("planner", "certs", "renderer", "dispatcher", "upgrader"), (ServiceHealth,),
            external="asked by operators and tools (`nats req bke.v1.health.dispatcher ''`); each service's HTTP /readyz serves the same object"),
    Channel(LEGACY_CLUSTER_REQUESTED, InstallCluster, "command", "Deprecated name of bke.v1.cluster.install, accepted until bke.v2.", (), ("planner",),
            external="sent only by CLIs and tooling of earlier releases"),
    Channel(LEGACY_RETRY_REQUESTED, RetryInstall, "command", "Deprecated name of bke.v1.cluster.retry, accepted until bke.v2.", (), ("dispatcher",),
            external="sent only by CLIs and tooling of earlier releases"),
    Channel(DEADLETTER + ".{service}", DeadLettered, "event", "A message a service gave up on: malformed (at once) or still failing after its maximum deliveries.", ("planner", "certs", "renderer", "dispatcher", "upgrader"), (),
            external="read by operators (`bke deadletters list|show`); no service consumes what another gave up on"),
)

