"""Command signing lives in `bke.state.command_signing` (the upgrader signs its commands too)."""
from bke.state.command_signing import CommandSigning, Sign, SignBytes

__all__ = ["CommandSigning", "Sign", "SignBytes"]
