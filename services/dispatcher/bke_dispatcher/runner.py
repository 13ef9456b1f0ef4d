"""The reconcile runner lives in `bke.runner` (the upgrader runs one too)."""
from bke.runner import Runner

__all__ = ["Runner"]
