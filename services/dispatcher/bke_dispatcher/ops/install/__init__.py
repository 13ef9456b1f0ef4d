"""The install: its phases (phases.PHASES) on the one loop (bke.adapters.operation), as the
other operations of ops/: a pure `decide`, a `run` with its carriers, a `store` for its record
(hashes, not one JSON string: see record.py) and the `commands` it sends."""
