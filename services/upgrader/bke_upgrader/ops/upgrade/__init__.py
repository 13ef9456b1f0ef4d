"""The upgrade record's operations (an upgrade, its retry, a changed spec): `decide` (pure), `run`
(the pass's hooks on the one loop and the record's store), `wire`. Their start, their carriers
(carriers.py, batches.py) and their end (stored_plan.py) are the upgrader's modules of those names."""
