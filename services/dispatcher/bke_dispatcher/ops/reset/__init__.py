"""Reset and delete: `decide` (pure), `run` (its store, start and carriers on the one loop), `wire`,
and the snapshot key its snapshots are sealed to."""
