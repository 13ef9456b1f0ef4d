"""The dispatcher's operations on a running cluster beside the install, one folder each: a pure
`decide` and a `run` on the one loop (bke.adapters.operation)."""
