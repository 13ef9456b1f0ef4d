"""The dispatcher's keys: installs and their phases, rotations, resets, joins, removals, the
agents it hears (registrations, heartbeats), health, and the addons and node-labels records
(bke.adapters.cluster_api.addons and .node_labels keep them; the upgrader's steps write them
through the same adapters).

    bke:installs                         set     clusters with an install record (dispatcher)
    bke:<c>:install                      hash    the install record              (dispatcher)
    bke:<c>:rotation[:results]           string / hash  a certificate rotation      (dispatcher)
    bke:rotations                        set     clusters with a rotation record (dispatcher)
    bke:<c>:reset[:results]              string / hash  a reset or delete         (dispatcher)
    bke:resets                           set     clusters with a reset record    (dispatcher)
    bke:<c>:join[:results]               string / hash  workers joining           (dispatcher)
    bke:<c>:removal[:results|:api]       string / hash  workers leaving; the lab's drain and Node deletion records (dispatcher)
    bke:joins / bke:removals             set     clusters with such a record     (dispatcher)
    bke:<c>:inputs                       hash    render/certs/seal -> what the services said (dispatcher)
    bke:<c>:sealed                       set     nodes whose bundles are sealed  (dispatcher)
    bke:<c>:phase:<slug> / cmd:<slug>    hash    a phase, its per-node commands  (dispatcher)
    bke:<c>:node                         hash    node -> {phase, status, step}   (dispatcher)
    bke:<c>:agents / heartbeat           hash    registrations, last heartbeat   (dispatcher)
    bke:<c>:heartbeat:cgroup             hash    node -> cgroup version reported (dispatcher)
    bke:<c>:heartbeat:runtime            hash    node -> agent version, Python, platform (dispatcher)
    bke:<c>:agents:accepted              hash    node -> agent id certs sealed to       (dispatcher)
    bke:<c>:addons                       hash    addon name -> apply record      (dispatcher)
    bke:<c>:node-labels                  hash    node -> labels, taints applied  (dispatcher)
    bke:<c>:health / health-meta / health-pods                                   (dispatcher)
    bke:<c>:refusals                     hash    refused commands and registrations (dispatcher)
    bke:command-key-rollover:acks        hash    "<c>/<node>" -> the next key id its agent took (dispatcher)
"""
from __future__ import annotations

from .common import PREFIX, OperationKeys, cluster_key

__all__ = [
    "accepted_agents_key", "addons_key", "agents_key", "command_key", "command_key_acks_key", "health_key",
    "health_meta_key", "health_pods_key", "heartbeat_cgroup_key", "heartbeat_key", "heartbeat_runtime_key",
    "inputs_key", "install_key", "installs_index", "join_key", "join_results_key", "joins_index", "node_labels_key",
    "node_status_key", "phase_key", "refusals_key", "removal_api_key", "removal_key", "removal_results_key",
    "removals_index", "reset_key", "reset_results_key", "resets_index", "rotation_key", "rotation_results_key",
    "rotations_index", "sealed_key",
]


# installs and their phases --------------------------------------------------------------------
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


def node_status_key(cluster: str) -> str:
    return cluster_key(cluster, "node")


def addons_key(cluster: str) -> str:
    """Hash addon name -> the record of its apply (the dispatcher's addons phase)."""
    return cluster_key(cluster, "addons")


def node_labels_key(cluster: str) -> str:
    """Hash node -> the labels and taints the `node-labels` phase applied (or, in the lab,
    recorded), with how and when (the dispatcher)."""
    return cluster_key(cluster, "node-labels")


# the other operations it runs (each resumed after a dispatcher restart): a certificate rotation;
# a reset or delete (its results: the snapshots and the ResetNode commands); a join of workers;
# a removal of workers (its results: the ResetNode commands)
rotation_key, rotation_results_key, rotations_index = OperationKeys("rotation", "rotations").builders()
reset_key, reset_results_key, resets_index = OperationKeys("reset", "resets").builders()
join_key, join_results_key, joins_index = OperationKeys("join", "joins").builders()
removal_key, removal_results_key, removals_index = OperationKeys("removal", "removals").builders()


def removal_api_key(cluster: str) -> str:
    """The lab's record of a removal's API actions: node -> {cordoned, drained, deleted} times."""
    return cluster_key(cluster, "removal", "api")


# the agents it hears -------------------------------------------------------------------------
def agents_key(cluster: str) -> str:
    return cluster_key(cluster, "agents")


def accepted_agents_key(cluster: str) -> str:
    """Hash node -> agent id that certs sealed the node's bundle to (dispatcher, from certs.sealed)."""
    return cluster_key(cluster, "agents", "accepted")


def heartbeat_key(cluster: str) -> str:
    return cluster_key(cluster, "heartbeat")


def heartbeat_cgroup_key(cluster: str) -> str:
    """node -> the cgroup version its agent's heartbeats report (written when it changes)."""
    return cluster_key(cluster, "heartbeat", "cgroup")


def heartbeat_runtime_key(cluster: str) -> str:
    """node -> the AgentRuntime its agent's heartbeats report, as JSON (written when it changes):
    the upgrade's agents step picks each node's wheels from it (bke_upgrader.agent_release)."""
    return cluster_key(cluster, "heartbeat", "runtime")


def refusals_key(cluster: str) -> str:
    """Hash: how many commands agents refused and registrations certs refused, and the last one
    (count, lastNode, lastReason, lastAt), for `bke status` (dispatcher)."""
    return cluster_key(cluster, "refusals")


def command_key_acks_key() -> str:
    """Hash "<cluster>/<node>" -> the next command key id the node's agent took (the dispatcher,
    from the announcement's result: bke_dispatcher.command_key)."""
    return f"{PREFIX}:command-key-rollover:acks"


# health --------------------------------------------------------------------------------------
def health_key(cluster: str) -> str:
    return cluster_key(cluster, "health")


def health_meta_key(cluster: str) -> str:
    return cluster_key(cluster, "health-meta")


def health_pods_key(cluster: str) -> str:
    return cluster_key(cluster, "health-pods")
