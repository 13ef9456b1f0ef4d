"""Every Redis key name BKE uses, in one place, so that every service agrees on them.

One function per key family; the module that owns a family (writes it) is named beside it.
Nothing outside this module spells a key: a rename here is a rename everywhere.

    bke:epoch                            string  this deployment's state id      (admin: bke.adapters.state.state_init)
    bke:clusters                         set     clusters with a plan            (planner)
    bke:request:<id>                     string  request id -> cluster           (planner)
    bke:<c>:plan / plan-meta             string / hash  (planner; the upgrader replaces it at an upgrade's end)
    bke:<c>:plan-replaceable             string  digest of a replaceable plan    (planner)
    bke:recent-plans                     list    the last plans and rejections    (planner)
    bke:<c>:pki:<part>                   manifest, certs, keys, version          (certs)
    bke:pki-clusters                     set     clusters with a stored PKI      (certs)
    bke:<c>:certs:agents                 hash    agents' sealing keys as seen by certs
    bke:<c>:api-credentials              hash    admin.conf, super-admin.conf, encrypted (certs)
    bke:<c>:files:<source>[:digest]      hash    per-node file sets (render, certs)
    bke:<c>:addon-manifests              hash    addon name -> rendered YAML     (renderer)
    bke:<c>:render:meta / vrrp-password  string                                  (renderer)
    bke:recent-renders                   list    the last renders and failures   (renderer)
    bke:installs                         set     clusters with an install record (dispatcher)
    bke:<c>:install                      hash    the install record              (dispatcher)
    bke:<c>:rotation[:results]           string / hash  a certificate rotation      (dispatcher)
    bke:rotations                        set     clusters with a rotation record (dispatcher)
    bke:<c>:reset[:results]              string / hash  a reset or delete         (dispatcher)
    bke:resets                           set     clusters with a reset record    (dispatcher)
    bke:<c>:join[:results]               string / hash  workers joining           (dispatcher)
    bke:<c>:removal[:results|:api]       string / hash  workers leaving; the lab's drain and Node deletion records (dispatcher)
    bke:joins / bke:removals             set     clusters with such a record     (dispatcher)
    bke:<c>:certs:ops / renewal:<rid>    hash / string  operations seen, answers (certs)
    bke:<c>:certs:lease:<slug>           string owner (PX)  one certs replica's periodic tick
    bke:<c>:inputs                       hash    render/certs/seal -> what the services said (dispatcher)
    bke:<c>:sealed                       set     nodes whose bundles are sealed  (dispatcher)
    bke:<c>:phase:<slug> / cmd:<slug>    hash    a phase, its per-node commands  (dispatcher)
    bke:<c>:node                         hash    node -> {phase, status, step}   (dispatcher)
    bke:<c>:lease:<slug>                 string  the phase lease                 (dispatcher)
    bke:<c>:agents / heartbeat           hash    registrations, last heartbeat   (dispatcher)
    bke:<c>:heartbeat:cgroup             hash    node -> cgroup version reported (dispatcher)
    bke:<c>:heartbeat:runtime            hash    node -> agent version, Python, platform (dispatcher)
    bke:<c>:upgrade:certs                string  the renewal's answer to an upgrade (upgrader)
    bke:<c>:addons                       hash    addon name -> apply record      (dispatcher)
    bke:<c>:node-labels                  hash    node -> labels, taints applied  (dispatcher)
    bke:<c>:health / health-meta / health-pods                                   (dispatcher)
    bke:<c>:refusals                     hash    refused commands and registrations (dispatcher)
    bke:auth:authority                   string  NATS operator/account seeds, encrypted (bke.adapters.auth)
    bke:auth:identities                  hash    identity name -> issued record  (bke.adapters.auth)
    bke:command-signing-key              string  the dispatcher's Ed25519 key, encrypted at rest (deployment)
    bke:command-signing-key:next         string  the next one during a rollover, encrypted at rest (admin:
                                                 bke.adapters.state.command_key_rotation)
    bke:command-key-rollover             string  the rollover in progress, public values only (admin)
    bke:command-key-rollover:acks        hash    "<c>/<node>" -> the next key id its agent took (dispatcher)
    bke:etcd-snapshot-key                string  the X25519 key etcd snapshots are sealed to, encrypted at rest
                                                 (admin: bke.adapters.state.state_init)
    bke:<writer>-signing-key             string  the plan or render writer's Ed25519 key: public half in clear,
                                                 private half encrypted at rest (admin: bke.adapters.state.state_init)
    bke:<c>:files:render:signatures      hash    node -> the renderer's signature of its files (renderer)
    bke:<c>:agents:provisioned           hash    node -> the agent key BKE provisioned  (certs)
    bke:<c>:agents:accepted              hash    node -> agent id certs sealed to       (dispatcher)
    bke:<c>:etcd-restore                 string  the current or last etcd restore, JSON  (upgrader)
    bke:<c>:etcd-restore:results         hash    command id -> the agent's answer        (upgrader)
    bke:etcd-restores                    set     clusters with an etcd restore record    (upgrader)
    bke:<c>:operation                    hash    the one operation running: kind, requestId, since
                                                 (claimed by dispatcher, upgrader, certs: bke.adapters.state.operation_slot)
"""
from __future__ import annotations

__all__ = [
    "api_credentials_key",
    "upgrade_certs_key",
    "etcd_restore_key",
    "etcd_restore_results_key",
    "etcd_restores_index",
    "paused_key",
    "pki_index",
    "recent_plans_key",
    "recent_renders_key",
    "upgrade_key",
    "upgrade_nodes_key",
    "upgrade_results_key",
    "upgrades_index",
    "auth_authority_key",
    "auth_identities_key",
    "certs_lease_key",
    "certs_renewal_key",
    "certs_ops_key",
    "rotations_index",
    "rotation_results_key",
    "rotation_key",
    "join_key",
    "join_results_key",
    "joins_index",
    "removal_api_key",
    "removal_key",
    "removal_results_key",
    "removals_index",
    "reset_key",
    "operation_key",
    "reset_results_key",
    "resets_index",
    "addon_manifests_key",
    "addons_key",
    "agents_key",
    "certs_agents_key",
    "accepted_agents_key",
    "command_signing_key",
    "command_signing_next_key",
    "command_key_rollover_key",
    "command_key_acks_key",
    "etcd_snapshot_key",
    "provisioned_agents_key",
    "cluster_key",
    "clusters_index",
    "command_key",
    "epoch_key",
    "all_keys_pattern",
    "health_key",
    "health_meta_key",
    "health_pods_key",
    "inputs_key",
    "heartbeat_cgroup_key",
    "heartbeat_runtime_key",
    "heartbeat_key",
    "install_key",
    "installs_index",
    "lease_key",
    "node_files_digest_key",
    "node_files_key",
    "node_files_signatures_key",
    "record_signing_key",
    "node_labels_key",
    "node_status_key",
    "phase_key",
    "pki_key",
    "plan_key",
    "plan_meta_key",
    "plan_replaceable_key",
    "render_meta_key",
    "request_key",
    "sealed_key",
    "vrrp_password_key",
]

PREFIX = "bke"


def cluster_key(cluster: str, *parts: str) -> str:
    """The building block of the per-cluster names below; call those, not this."""
    return ":".join((PREFIX, cluster, *parts))


# the state as a whole -----------------------------------------------------------------------
def epoch_key() -> str:
    """A random id written once per deployment's state by the admin side (`bke state init`,
    bke.adapters.state.state_init; services only read it, bke.adapters.state.epoch): if it changes or vanishes
    under a running service, the state was lost or replaced."""
    return f"{PREFIX}:epoch"


def all_keys_pattern() -> str:
    """A SCAN pattern that matches every key above (bke.adapters.state.backup exports exactly these)."""
    return f"{PREFIX}:*"


# planner -------------------------------------------------------------------------------------
def clusters_index() -> str:
    return f"{PREFIX}:clusters"


def plan_replaceable_key(cluster: str) -> str:
    """The planner's own mark: the digest of a plan whose install failed before any node
    changed, so that a corrected spec may replace it."""
    return cluster_key(cluster, "plan-replaceable")


def request_key(request_id: str) -> str:
    return f"{PREFIX}:request:{request_id}"


def recent_plans_key() -> str:
    """The planner's bounded list of its last answers (its dashboard). Global keys have two
    parts, so no cluster's key (three or more) can be one of them."""
    return f"{PREFIX}:recent-plans"


def plan_key(cluster: str) -> str:
    return cluster_key(cluster, "plan")


def plan_meta_key(cluster: str) -> str:
    return cluster_key(cluster, "plan-meta")


# certs ---------------------------------------------------------------------------------------
def pki_key(cluster: str, part: str) -> str:
    """`part`: manifest, certs, keys (encrypted at rest) or version."""
    return cluster_key(cluster, "pki", part)


def pki_index() -> str:
    """Clusters with a stored PKI, written with each save (the certs dashboard and metrics)."""
    return f"{PREFIX}:pki-clusters"


def certs_agents_key(cluster: str) -> str:
    return cluster_key(cluster, "certs", "agents")


# per-node file sets (certs and renderer write, the dispatcher reads) ---------------------------
def api_credentials_key(cluster: str) -> str:
    """The kubeconfigs BKE's own API work uses (admin.conf, super-admin.conf), each encrypted at
    rest: written by certs, read by the dispatcher and the upgrader, who never read the PKI."""
    return cluster_key(cluster, "api-credentials")


def node_files_key(cluster: str, source: str) -> str:
    """`source`: "render" or "certs"."""
    return cluster_key(cluster, "files", source)


def node_files_digest_key(cluster: str, source: str) -> str:
    """Set once a source's file set is complete."""
    return node_files_key(cluster, source) + ":digest"


def node_files_signatures_key(cluster: str, source: str) -> str:
    """Node -> its writer's signature of its files (bke.core.secrets.record_signing)."""
    return node_files_key(cluster, source) + ":signatures"


# renderer ------------------------------------------------------------------------------------
def addon_manifests_key(cluster: str) -> str:
    """Hash addon name -> multi-document YAML: the renderer writes, the addons phase reads."""
    return cluster_key(cluster, "addon-manifests")


def recent_renders_key() -> str:
    """The renderer's bounded list of its last renders and failures (its dashboard)."""
    return f"{PREFIX}:recent-renders"


def render_meta_key(cluster: str) -> str:
    return cluster_key(cluster, "render", "meta")


def vrrp_password_key(cluster: str) -> str:
    return cluster_key(cluster, "render", "vrrp-password")


# dispatcher ----------------------------------------------------------------------------------
def installs_index() -> str:
    return f"{PREFIX}:installs"


def install_key(cluster: str) -> str:
    return cluster_key(cluster, "install")


def phase_key(cluster: str, slug: str) -> str:
    return cluster_key(cluster, "phase", slug)


def command_key(cluster: str, slug: str) -> str:
    return cluster_key(cluster, "cmd", slug)


def inputs_key(cluster: str) -> str:
    """What the renderer and certs services said (their events), per input."""
    return cluster_key(cluster, "inputs")


def sealed_key(cluster: str) -> str:
    """Nodes whose bundles the certs service said are sealed (`certs.sealed`)."""
    return cluster_key(cluster, "sealed")


def rotation_key(cluster: str) -> str:
    """The cluster's current or last certificate rotation (JSON)."""
    return cluster_key(cluster, "rotation")


def rotation_results_key(cluster: str) -> str:
    """Command id -> the agent's answer, for the rotation's commands."""
    return cluster_key(cluster, "rotation", "results")


def operation_key(cluster: str) -> str:
    """The cluster's operation slot: which operation runs (bke.adapters.state.operation_slot)."""
    return cluster_key(cluster, "operation")


def reset_key(cluster: str) -> str:
    """The cluster's current or last reset or delete (JSON)."""
    return cluster_key(cluster, "reset")


def reset_results_key(cluster: str) -> str:
    """Command id -> the agent's answer, for the reset's commands (snapshots and ResetNode)."""
    return cluster_key(cluster, "reset", "results")


def resets_index() -> str:
    """Clusters with a reset record (resumed after a dispatcher restart)."""
    return f"{PREFIX}:resets"


def join_key(cluster: str) -> str:
    """The cluster's current or last join of workers (JSON)."""
    return cluster_key(cluster, "join")


def join_results_key(cluster: str) -> str:
    """Command id -> the agent's answer, for a join's commands."""
    return cluster_key(cluster, "join", "results")


def joins_index() -> str:
    """Clusters with a join record (resumed after a dispatcher restart)."""
    return f"{PREFIX}:joins"


def removal_key(cluster: str) -> str:
    """The cluster's current or last removal of workers (JSON)."""
    return cluster_key(cluster, "removal")


def removal_results_key(cluster: str) -> str:
    """Command id -> the agent's answer, for a removal's ResetNode commands."""
    return cluster_key(cluster, "removal", "results")


def removal_api_key(cluster: str) -> str:
    """The lab's record of a removal's API actions: node -> {cordoned, drained, deleted} times."""
    return cluster_key(cluster, "removal", "api")


def removals_index() -> str:
    """Clusters with a removal record (resumed after a dispatcher restart)."""
    return f"{PREFIX}:removals"


def rotations_index() -> str:
    """Clusters with a rotation record (resumed after a dispatcher restart)."""
    return f"{PREFIX}:rotations"


def certs_ops_key(cluster: str) -> str:
    """The certs service's view of the cluster's operations (install, rotation) from events."""
    return cluster_key(cluster, "certs", "ops")


def certs_lease_key(cluster: str, slug: str) -> str:
    """A lease of the certs service's replicas (their automatic renewal's tick)."""
    return cluster_key(cluster, "certs", "lease", slug)


def certs_renewal_key(cluster: str, request_id: str) -> str:
    """A renewal request's answer, kept for a redelivery of the same request."""
    return cluster_key(cluster, "certs", "renewal", request_id)


def node_status_key(cluster: str) -> str:
    return cluster_key(cluster, "node")


def upgrade_key(cluster: str) -> str:
    """The cluster's current or last upgrade (JSON, bke.core.upgrade.run.UpgradeRun)."""
    return cluster_key(cluster, "upgrade")


def upgrade_certs_key(cluster: str) -> str:
    """The certs service's answer to the upgrade's renewal (CertsRenewed or CertsFailed, JSON)."""
    return cluster_key(cluster, "upgrade", "certs")


def upgrade_results_key(cluster: str) -> str:
    """Command id -> the agent's answer, for the upgrade's commands."""
    return cluster_key(cluster, "upgrade", "results")


def paused_key(cluster: str, owner: str) -> str:
    """A person paused the cluster's operations (bke.adapters.state.pause): one flag per service that runs
    operations, in that service's record ("install": the dispatcher's; "upgrade": the upgrader's)."""
    return cluster_key(cluster, "paused") if owner == "dispatcher" else cluster_key(cluster, owner, "paused")


def upgrade_nodes_key(cluster: str) -> str:
    """Node -> the versions its components run, and the target it is behind on (if it is),
    written when an upgrade ends (bke.core.upgrade.node_versions): what `bke retry --nodes` reads."""
    return cluster_key(cluster, "upgrade", "nodes")


def upgrades_index() -> str:
    """Clusters with an upgrade record (resumed after an upgrader restart)."""
    return f"{PREFIX}:upgrades"


def etcd_restore_key(cluster: str) -> str:
    """The cluster's current or last etcd restore (JSON, bke.core.etcdsnap.restore_run.RestoreRun)."""
    return cluster_key(cluster, "etcd-restore")


def etcd_restore_results_key(cluster: str) -> str:
    """Command id -> the agent's answer, for the etcd restore's commands."""
    return cluster_key(cluster, "etcd-restore", "results")


def etcd_restores_index() -> str:
    """Clusters with an etcd restore record (resumed after an upgrader restart)."""
    return f"{PREFIX}:etcd-restores"


def lease_key(cluster: str, slug: str) -> str:
    return cluster_key(cluster, "lease", slug)


def agents_key(cluster: str) -> str:
    return cluster_key(cluster, "agents")


def heartbeat_key(cluster: str) -> str:
    return cluster_key(cluster, "heartbeat")


def heartbeat_cgroup_key(cluster: str) -> str:
    """node -> the cgroup version its agent's heartbeats report (written when it changes)."""
    return cluster_key(cluster, "heartbeat", "cgroup")


def heartbeat_runtime_key(cluster: str) -> str:
    """node -> the AgentRuntime its agent's heartbeats report, as JSON (written when it changes):
    the upgrade's agents step picks each node's wheels from it (bke_upgrader.agent_release)."""
    return cluster_key(cluster, "heartbeat", "runtime")


def addons_key(cluster: str) -> str:
    """Hash addon name -> the record of its apply (the dispatcher's addons phase)."""
    return cluster_key(cluster, "addons")


def node_labels_key(cluster: str) -> str:
    """Hash node -> the labels and taints the `node-labels` phase applied (or, in the lab,
    recorded), with how and when (the dispatcher)."""
    return cluster_key(cluster, "node-labels")


def health_key(cluster: str) -> str:
    return cluster_key(cluster, "health")


def health_meta_key(cluster: str) -> str:
    return cluster_key(cluster, "health-meta")


def health_pods_key(cluster: str) -> str:
    return cluster_key(cluster, "health-pods")


def refusals_key(cluster: str) -> str:
    """Hash: how many commands agents refused and registrations certs refused, and the last one
    (count, lastNode, lastReason, lastAt), for `bke status` (dispatcher)."""
    return cluster_key(cluster, "refusals")


def auth_authority_key() -> str:
    """The NATS trust chain's seeds and revocations, encrypted at rest (bke.adapters.auth.registry)."""
    return f"{PREFIX}:auth:authority"


def auth_identities_key() -> str:
    """Every identity ever issued on the bus: name -> JSON record (bke.adapters.auth.registry)."""
    return f"{PREFIX}:auth:identities"


# trust: keys recorded by BKE, never learned from the bus -----------------
def command_signing_key() -> str:
    """The dispatcher replicas' one command-signing key (bke.core.secrets.signing), per deployment."""
    return f"{PREFIX}:command-signing-key"


def command_signing_next_key() -> str:
    """The key a rollover switches the signers to (bke.adapters.state.command_key_rotation): sealed
    as the current one is, so that the switch copies its bytes."""
    return f"{PREFIX}:command-signing-key:next"


def command_key_rollover_key() -> str:
    """The command-key rollover in progress (bke.core.secrets.command_key_rollover): public values."""
    return f"{PREFIX}:command-key-rollover"


def command_key_acks_key() -> str:
    """Hash "<cluster>/<node>" -> the next command key id the node's agent took (the dispatcher,
    from the announcement's result: bke_dispatcher.command_key)."""
    return f"{PREFIX}:command-key-rollover:acks"


def etcd_snapshot_key() -> str:
    """The deployment's one etcd snapshot key (bke.core.secrets.snapshot_key): agents seal to its
    public half, only BKE opens a snapshot."""
    return f"{PREFIX}:etcd-snapshot-key"


def record_signing_key(writer: str) -> str:
    """A record writer's signing key (bke.core.secrets.record_signing): `plan` or `render`. Two
    parts, like every global key: no cluster's key pattern (`bke:*:plan`) can match it."""
    return f"{PREFIX}:{writer}-signing-key"


def provisioned_agents_key(cluster: str) -> str:
    """Hash node -> ProvisionAgent JSON: the agent key recorded at provisioning (certs)."""
    return cluster_key(cluster, "agents", "provisioned")


def accepted_agents_key(cluster: str) -> str:
    """Hash node -> agent id that certs sealed the node's bundle to (dispatcher, from certs.sealed)."""
    return cluster_key(cluster, "agents", "accepted")
