"""How much input a spec may be, and reading it without ever holding more than that.

Every limit is a named constant with its reason, so that the CLI, the planner (which reads the
spec from the object store) and the tests refuse the same input with the same words.
"""
from __future__ import annotations

from typing import BinaryIO

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_NODES",
    "MAX_SCALAR_BYTES",
    "MAX_SPEC_BYTES",
    "MAX_YAML_DEPTH",
    "SpecTooLarge",
    "read_capped",
    "too_large_message",
]

# Why 8 MiB: the largest fleet we plan for (MAX_NODES BKENode documents of ~300 bytes each,
# labels and per-node extraArgs included) is about 3 MiB; 8 MiB leaves room for generous labels
# while keeping what the CLI and the planner hold in memory (YAML events, models, plan) bounded.
MAX_SPEC_BYTES = 8 * 1024 * 1024
MAX_NODES = 10_000
# The deepest legitimate path is ~8 levels (document > spec > clusterConfig > cluster >
# containerRuntime > registryMirrors > host > list). 64 is far above it and far below the
# depth at which a recursive YAML composer exhausts the stack. (libyaml >= 0.2.5 refuses
# nesting past 1000 on its own, "exceeded maximum nesting depth" - its patch "Limit depth of
# nesting by default", yaml_set_max_nest_level - but PyYAML's pure-Python loader has no limit.)
MAX_YAML_DEPTH = 64
# Nodes that aliases (`*anchor`) expand to, counted as if every alias were copied out: sharing
# a block of labels or extraArgs across 10,000 nodes stays far below; a "billion laughs"
# document (each level aliasing the one below ten times) passes it within a few levels.
MAX_ALIAS_NODES = 1_000_000
# One value: the longest legitimate ones are extraArgs such as --tls-cipher-suites (~1 KiB).
# Bounded so that an error message quoting a value stays readable.
MAX_SCALAR_BYTES = 64 * 1024


class SpecTooLarge(ValueError):
    """The input passed MAX_SPEC_BYTES; raised before more than the limit + 1 bytes were read."""

    def __init__(self, size: int | None, limit: int = MAX_SPEC_BYTES):
        super().__init__(too_large_message(size, limit))
        self.size = size
        self.limit = limit


def too_large_message(size: int | None, limit: int = MAX_SPEC_BYTES) -> str:
    what = f"spec is {size} bytes" if size is not None else "spec is larger than the limit"
    return f"{what}; the limit is {limit} ({limit / (1024 * 1024):g} MiB)"


def read_capped(stream: BinaryIO, limit: int = MAX_SPEC_BYTES, chunk: int = 1024 * 1024) -> bytes:
    """Read the whole stream if it holds at most `limit` bytes, else raise SpecTooLarge having
    read at most `limit + 1` bytes: `/dev/zero`, a FIFO or a growing file never fills memory."""
    parts: list[bytes] = []
    got = 0
    while got <= limit:
        data = stream.read(min(chunk, limit + 1 - got))
        if not data:
            return b"".join(parts)
        parts.append(data)
        got += len(data)
    raise SpecTooLarge(None, limit)
