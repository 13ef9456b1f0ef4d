"""Every subject on the bus, versioned, with its message model and direction: `CHANNELS`.

Each contract module declares its own channel rows beside its models (its `CHANNELS`,
bke.contracts.channel); this module gathers them from every module of the package, found by
walking it, so a new message's row is in the table the day its module declares it. From the
table follow the streams' subjects (below), every identity's NATS permissions
(bke.adapters.auth.permissions), the AsyncAPI document (bke.contracts.asyncapi) and the generated
references, so none of them can drift from the code.

Commands are imperative, events past tense. The rows come in the order of their modules' names,
then as each module lists them.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

from .channel import Channel, Stored
from .cluster import CLUSTER_REJECTED, INSTALL_CLUSTER, LEGACY_CLUSTER_REQUESTED, PLAN_CREATED
from .deadletter import DEADLETTER
from .install import LEGACY_RETRY_REQUESTED, RETRY_INSTALL

__all__ = [
    "AGENT_COMMAND_SUBJECTS",
    "AGENT_OUTPUT_SUBJECTS",
    "CHANNELS",
    "CLUSTER_REJECTED",
    "INSTALL_CLUSTER",
    "COMMAND_SUBJECTS",
    "Channel",
    "DEADLETTER",
    "EVENT_SUBJECTS",
    "LEGACY_CLUSTER_REQUESTED",
    "LEGACY_COMMANDS",
    "LEGACY_RETRY_REQUESTED",
    "PLAN_CREATED",
    "contract_modules",
]

_PACKAGE = __name__.rpartition(".")[0]
# Modules of the package that are built on the table rather than part of it: importing them
# while the table is gathered would import this module in a circle.
_BUILT_ON_THE_TABLE = frozenset({"asyncapi", "subjects"})


def contract_modules() -> dict[str, ModuleType]:
    """Module name -> module, for every contract module of the package (sorted by name)."""
    package = importlib.import_module(_PACKAGE)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name not in _BUILT_ON_THE_TABLE)
    return {name: importlib.import_module(f"{_PACKAGE}.{name}") for name in names}


def _gathered() -> tuple[Channel, ...]:
    rows: list[Channel] = []
    for name, module in contract_modules().items():
        own = getattr(module, "CHANNELS", ())
        if not all(isinstance(ch, Channel) for ch in own):
            raise TypeError(f"bke.contracts.{name}.CHANNELS: every row must be a Channel")
        rows.extend(own)
    seen: set[str] = set()
    for ch in rows:
        if ch.subject in seen:
            raise ValueError(f"{ch.subject}: declared by two channel rows")
        seen.add(ch.subject)
    return tuple(rows)


CHANNELS: tuple[Channel, ...] = _gathered()

# Commands are imperative: two subjects of earlier releases were named like events. They stay
# accepted, each by the service that handles its new name, with a warning per message, until
# bke.v2: older CLIs and tooling keep working, and commands queued across a rolling upgrade are
# not lost. Nothing in BKE publishes them any more.
LEGACY_COMMANDS: dict[str, str] = {LEGACY_CLUSTER_REQUESTED: INSTALL_CLUSTER, LEGACY_RETRY_REQUESTED: RETRY_INSTALL}


def _stored(stream: Stored) -> tuple[str, ...]:
    """The subjects of the channels kept in `stream`, each placeholder one `*`. Subjects of one
    stream may not overlap another's, so they are listed one by one (the `bke.v1.cluster.*`
    commands and the rejection sit in two streams)."""
    return tuple(dict.fromkeys(re.sub(r"\{[a-z]+\}", "*", ch.subject) for ch in CHANNELS if ch.stream == stream))


# Stream membership, from each channel's `stream` (bke.adapters.bus.streams declares the streams).
COMMAND_SUBJECTS: tuple[str, ...] = _stored("commands")
EVENT_SUBJECTS: tuple[str, ...] = _stored("events")
AGENT_COMMAND_SUBJECTS: tuple[str, ...] = _stored("agent-commands")
AGENT_OUTPUT_SUBJECTS: tuple[str, ...] = _stored("agent-outputs")
