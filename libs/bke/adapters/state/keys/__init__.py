"""Every Redis key name BKE uses, one module per family, named after the one who writes it.

Nothing outside these modules spells a key: a rename here is a rename everywhere. Who may import
a family is held by an import-linter contract per family (pyproject.toml, "Redis keys of ..."):
its writer, the stores in bke.adapters that write or read it for that writer, the admin side
(bke.adapters.state's state commands, the lab, the CLI's admin commands). A read by anyone else
is named in that contract's `ignore_imports`, with why.

    common      bke:epoch, the prefix and the per-cluster building block   (admin; every service reads)
    planner     the planner's indexes, requests, recent answers             (planner)
    plan        bke:<c>:plan, plan-meta                                     (planner; the upgrader replaces it)
    certs       the PKI, agents' keys, API credentials, renewals            (certs)
    node_files  bke:<c>:files:<source>[:digest|:signatures]                 (certs and renderer, each its source)
    renderer    addon manifests, render meta, VRRP password, recent renders (renderer)
    dispatcher  install, phases, rotations, resets, joins, removals, agents, heartbeats, health (dispatcher)
    shared      the operation slot, leases, pause flags                      (each service that runs operations)
    upgrader    upgrades and etcd restores                                   (upgrader)
    auth        the NATS authority and the identity registry                 (admin; the renewer)
    trust       keys BKE recorded: command signing, etcd snapshots, record writers (admin; the dispatcher)

Global keys have two parts (`bke:<name>`), so no cluster's key (three or more) can be one of them.
"""
