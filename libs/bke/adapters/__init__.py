"""Everything that talks to the outside: Redis (`state`), NATS (`bus`, `auth`), HTTP, SSH, the
embedded servers (`runtime`), a cluster's API (`cluster_api`, `drain`), the stores of the PKI
and of etcd snapshots, and the service runtime (`settings`, `logs`, `runner`, `periodic`,
`tasks`). Adapters build on bke.core and bke.contracts, never the other way round.

This package's `__init__` imports nothing: the node agent imports a few of its modules and
must not load the rest (faststream, redis, the Kubernetes client).
"""
