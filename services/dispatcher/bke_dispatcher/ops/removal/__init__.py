"""Removing workers: `decide` (pure), `run` (its store, start and carriers on the one loop), `wire`."""
