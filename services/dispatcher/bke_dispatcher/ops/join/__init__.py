"""Joining workers and etcd-only nodes: `decide` (pure, with `agents` and `etcd`), `run` (its store,
start, the services' answers and carriers on the one loop), `wire`."""
