"""etcd snapshots: taken on a member's node by its agent (the `EtcdSnapshot` step), sealed to the
deployment's snapshot key, stored in a JetStream object store, listed, opened and restored.

* `records`        what is recorded per snapshot, object names and ids
* `sealed_stream`  a large file sealed piece by piece
* `step`           the agent step for a member, from the plan
* `restore`        `bke etcd restore` as a pure plan: its stages and each node's agent steps
* `restore_run`    a running restore's record and its next decision (the upgrader runs it)

The modules that read etcd's stream, the object store, files and etcdutl are
bke.adapters.etcdsnap.

Import the submodules; this package re-exports nothing so that the agent loads only what it uses.
"""
from __future__ import annotations

__all__: list[str] = []
