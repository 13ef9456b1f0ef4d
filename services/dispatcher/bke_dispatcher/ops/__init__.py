"""The dispatcher's operations on a running cluster beside the install, one folder each: a pure
`decide`, a `run` on the one loop (bke.adapters.operation: the record's store, the start, the
carriers, the view) and a `wire` that registers it (`wiring.wire_operations`)."""
