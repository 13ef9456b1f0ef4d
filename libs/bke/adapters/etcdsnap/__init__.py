"""etcd snapshots, the side that does I/O (the records, the sealed stream format, the agent step
and the restore's plan and run are bke.core.etcdsnap):

* `etcd_stream`    etcd's snapshot stream (gRPC gateway) and etcd's own trailing hash
* `upload`         an object added with publishes only (what an agent may do)
* `store`          bucket, listing, fetch-and-open (BKE's side)
* `delivery`       a stored snapshot re-sealed piece by piece to one node's agent, and opened there
* `local`          a restore into a fresh data dir with etcdutl (`--into`)

Import the submodules; this package re-exports nothing so that the agent loads only what it uses.
"""
from __future__ import annotations

__all__: list[str] = []
