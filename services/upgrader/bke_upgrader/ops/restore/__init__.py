"""etcd restore: `decide` (pure), `store`, `pieces` (the snapshot to the members), `run` (its start
and carriers on the one loop), `wire`."""
