"""The dispatcher's operations beside the install, wired: each registers itself (its folder's
`wire`: store, loop on a runner, subscriber). No logic beyond that."""
from __future__ import annotations

from dataclasses import dataclass

from bke.adapters.operation import Operations

from .deps import Deps
from .join.run import Joins
from .join.wire import wire as wire_join
from .removal.wire import wire as wire_removal
from .reset.wire import wire as wire_reset
from .rotation.wire import wire as wire_rotation

__all__ = ["Deps", "Wired", "wire_operations"]


@dataclass(frozen=True)
class Wired:
    operations: Operations  # results, resumes, stops and pauses go through here
    joins: Joins  # the renderer's and certs service's answers to a join are the join's


def wire_operations(d: Deps) -> Wired:
    ops = Operations()
    wire_rotation(d, ops)
    wire_reset(d, ops)
    joins = wire_join(d, ops)
    wire_removal(d, ops)
    return Wired(ops, joins)
