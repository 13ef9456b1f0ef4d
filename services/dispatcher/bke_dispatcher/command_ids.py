"""The ids of the dispatcher's commands to agents: `<cluster>/<slug>/<node>/<generation>`.

Deterministic, so that a command sent again after a crash keeps its id (JetStream drops the
duplicate; an agent replays the answer of a command it completed); a retry bumps the node's
generation. The slug is an install phase's, or an operation's (`rotation-<id>`, `reset-<id>`...).
"""
from __future__ import annotations

__all__ = ["command_id", "parse_command_id"]


def command_id(cluster: str, slug: str, node: str, gen: int) -> str:
    return f"{cluster}/{slug}/{node}/{gen}"


def parse_command_id(cid: str) -> tuple[str, str, str, int]:
    cluster, slug, node, gen = cid.split("/")
    return cluster, slug, node, int(gen)
