"""Command signing lives in `bke.state.command_signing` (the upgrader signs its commands too)."""
from bke.state.command_signing import CommandSigning, Prefetch, Sign, SignBytes

__all__ = ["CommandSigning", "Prefetch", "Sign", "SignBytes"]
