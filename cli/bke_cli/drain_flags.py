"""The drain's two switches, as every command whose operation drains nodes takes them (kubectl
drain's `--force` and `--delete-emptydir-data`, prefixed: they are the drain's, not the command's)."""
from __future__ import annotations

import typer

from bke.contracts.drain import DrainOptions

__all__ = ["DRAIN_EMPTYDIR", "DRAIN_FORCE", "drain_options"]

DRAIN_FORCE = typer.Option(False, "--drain-force",
                           help="a drain may evict pods no controller owns; nothing brings them back (kubectl drain --force)")
DRAIN_EMPTYDIR = typer.Option(False, "--drain-delete-emptydir-data",
                              help="a drain may evict pods with emptyDir volumes; their data is lost "
                                   "(kubectl drain --delete-emptydir-data)")


def drain_options(force: bool, delete_emptydir_data: bool) -> DrainOptions | None:
    """The request's `drain` field: None (left out of the message) unless a switch is on."""
    if not (force or delete_emptydir_data):
        return None
    return DrainOptions(force=force, delete_emptydir_data=delete_emptydir_data)
