"""How much each stream and bucket may hold, and how much one agent may send: as data.

Why: with no `max_bytes` on any stream and no limit in the user JWTs, one agent publishing as
fast as it can filled JetStream's storage for every cluster. Now:

* every stream and bucket has `max_bytes`, sized per cluster (`PER_CLUSTER`, for a cluster of up
  to 10,000 nodes) times the clusters the deployment is sized for (`bke streams ensure
  --clusters N`, BKE_JETSTREAM_CLUSTERS; default 1), and reserved by nats-server against its
  `max_file` (a deployment's volume must hold `storage_for(N)`);
* the agents' outputs (results, registrations, refusals) have a stream of their own,
  BKE_AGENT_OUT (bke.adapters.bus.streams), apart from the commands in BKE_AGENT, which only the
  dispatcher and the upgrader publish. It keeps an output until every consumer it is for has
  acknowledged it (interest retention), at most `AGENT_OUTPUT_SUBJECT_MSGS` per subject (every
  agent subject is one node's: a node that floods pushes out only its own older outputs), each at
  most `AGENT_OUTPUT_MAX_MSG` bytes, and when the stream is full it refuses new messages instead
  of dropping old ones (discard new): a flood never evicts another node's or another cluster's
  stored message, and a node's footprint is at most its subjects times that count times that size;
* the command stream keeps at most `AGENT_SUBJECT_MSGS` commands per node subject;
* a message on the agent stream is at most `AGENT_MAX_PAYLOAD` bytes (the stream refuses a larger
  one), and an agent's JWT carries the same `payload` limit and a `subs` limit (nats-server
  enforces both from a user JWT; it does not enforce `data`), so the connection itself refuses;
* the snapshot bucket keeps objects `SNAPSHOT_TTL_S` (it is append-only: bke.adapters.bus.streams), so it
  cannot fill for ever.

Sizes per cluster: the 5,000-node upgrade bench moved 34 MB each way through NATS, and an
install's commands carry each node's files; a week of operations of a 10,000-node cluster fits
in the agent stream's share several times over.
"""
from __future__ import annotations

from bke.contracts.agent_steps import ETCD_SNAPSHOT_BUCKET

__all__ = ["AGENT_MAX_PAYLOAD", "AGENT_MAX_SUBS", "AGENT_OUTPUT_MAX_MSG", "AGENT_OUTPUT_SUBJECT_MSGS", "AGENT_SUBJECT_MSGS", "CLUSTERS_ENV", "PER_CLUSTER", "SNAPSHOT_TTL_S",
           "max_bytes", "storage_for"]

MiB = 1 << 20
GiB = 1 << 30
CLUSTERS_ENV = "BKE_JETSTREAM_CLUSTERS"
# bytes one cluster may hold in each stream (`OBJ_<bucket>` for a bucket)
PER_CLUSTER: dict[str, int] = {
    "BKE_AGENT": 1 * GiB,
    # outputs waiting for their consumers: about one in flight per node and consumer when they
    # keep up (65 MB for 10,000 nodes at the largest measured result, 6.5 KB); a consumer that is
    # down leaves AGENT_OUTPUT_SUBJECT_MSGS of each node's outputs of its subjects (520 MB at
    # that size, for 10,000 nodes): twice that
    "BKE_AGENT_OUT": 1 * GiB,
    "BKE_EVENTS": 128 * MiB,
    "BKE_COMMANDS": 64 * MiB,
    "BKE_DEADLETTER": 128 * MiB,
    "OBJ_bke-blobs": 256 * MiB,
    f"OBJ_{ETCD_SNAPSHOT_BUCKET}": 4 * GiB,
}
AGENT_SUBJECT_MSGS = 4096  # commands per node subject
# Outputs per node subject. An agent runs one command at a time (max_ack_pending=1 on its command
# consumer), so a node has one output per subject in flight while its consumers keep up; 8 leaves
# room for a consumer that is behind by several of the dispatcher's health rounds (one a minute).
# Beyond it the subject's own oldest output goes: a flood costs only the flooding node.
AGENT_OUTPUT_SUBJECT_MSGS = 8
# The largest output the stream takes. Measured: the largest result of an install of the seed
# cluster in the lab is 6.5 KB (a step's output is cut to OUTPUT_LIMIT, 4 KiB, per stream); this
# is 40 times that, room for a command of many steps that all print that much, and an agent
# cuts a larger result's outputs to fit (bke_agent.outputs.fit_result). An agent's own JWT
# allows AGENT_MAX_PAYLOAD (snapshot chunks), so this is the stream's own bound.
AGENT_OUTPUT_MAX_MSG = 256 * 1024
AGENT_MAX_PAYLOAD = 512 * 1024  # a snapshot chunk is 256 KiB (bke.adapters.etcdsnap.upload.CHUNK)
AGENT_MAX_SUBS = 64  # its inbox, its command subject, a restore's replies and a few more
SNAPSHOT_TTL_S = 30 * 86400.0


def max_bytes(stream: str, clusters: int = 1) -> int:
    return PER_CLUSTER[stream] * max(clusters, 1)


def storage_for(clusters: int = 1) -> int:
    """The JetStream file storage the streams reserve for `clusters` clusters."""
    return sum(PER_CLUSTER.values()) * max(clusters, 1)
