"""A changed spec (`bke apply` on an installed cluster): `run` (its request decided and its run of
the upgrade record started), `wire`. Its passes are the upgrade record's (ops/upgrade)."""
