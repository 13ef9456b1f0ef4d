"""Rules about component flags, as data: the denylist and the version gates.

Depends only on `bke.core.versions`, so that spec validation (`bke.core.spec`), the planner and the
renderer all read the same rows without importing each other.
"""
from .catalog import Flag, FlagVerdict, flag_verdict, known_flags
from .denylist import DENYLIST, DenyRule, go_bool
from .gates import GATES, Gate, VersionSet, family_of, gate_for, gate_open

__all__ = ["Flag", "FlagVerdict", "flag_verdict", "known_flags", "DENYLIST", "GATES", "DenyRule", "Gate", "VersionSet", "family_of", "gate_for", "gate_open", "go_bool"]
