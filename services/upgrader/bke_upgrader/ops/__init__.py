"""The upgrader's operations on the one loop (bke.adapters.operation), a folder each: `decide`
(pure), `run` (its store, start and carriers), `wire` (registers itself)."""
