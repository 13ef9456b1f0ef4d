"""etcd snapshots: taken on a member's node by its agent (the `EtcdSnapshot` step), sealed to the
deployment's snapshot key, stored in a JetStream object store, listed, opened and restored.

* `records`        what is recorded per snapshot, object names and ids
* `etcd_stream`    etcd's snapshot stream (gRPC gateway) and etcd's own trailing hash
* `sealed_stream`  a large file sealed piece by piece
* `upload`         an object added with publishes only (what an agent may do)
* `step`           the agent step for a member, from the plan
* `store`          bucket, listing, fetch-and-open (BKE's side)
* `restore`        `bke etcd restore` as a pure plan: its stages and each node's agent steps
* `restore_run`    a running restore's record and its next decision (the upgrader runs it)
* `delivery`       a stored snapshot re-sealed piece by piece to one node's agent, and opened there
* `local`          a restore into a fresh data dir with etcdutl (`--into`)

Import the submodules; this package re-exports nothing so that the agent loads only what it uses.
"""
from __future__ import annotations

__all__: list[str] = []
