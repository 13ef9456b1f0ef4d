"""Certificate rotation: `decide` (pure), `run` (its store, start and carrier on the one loop), `wire`."""
