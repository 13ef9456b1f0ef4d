"""Pausing a cluster's operations: a person stops an install, rotation or upgrade from
taking its next step, and lets it go on later.

`PauseCluster` (a command on `bke.v1.cluster.pause`, `paused` true or false) goes to every service
that runs operations (the dispatcher: installs and rotations; the upgrader: upgrades). Each
records it and answers `PauseChanged` on `bke.v1.pause.<cluster>.changed` naming itself, so the
CLI knows when both have it. A paused operation finishes the step it is in (commands already
sent run to their end, their answers are kept) and sends nothing new until resumed.
"""
from __future__ import annotations

from pydantic import Field

from .base import Message, changed_subject
from .channel import Channel

__all__ = ["CHANNELS", "PAUSE_CLUSTER", "PAUSE_OWNERS", "PauseChanged", "PauseCluster", "pause_subject"]

PAUSE_CLUSTER = "bke.v1.cluster.pause"
PAUSE_OWNERS = ("dispatcher", "upgrader")  # the services whose operations a pause holds


def pause_subject(cluster: str) -> str:
    return changed_subject("pause", cluster)


class PauseCluster(Message):
    request_id: str = Field(min_length=1, max_length=128)
    cluster: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    paused: bool
    reason: str = Field("", max_length=500)


class PauseChanged(Message):
    request_id: str
    cluster: str
    service: str
    paused: bool
    reason: str = ""
    at: str  # when the service recorded it (ISO 8601, UTC)


CHANNELS: tuple[Channel, ...] = (
    # The command goes to two services (dispatcher, upgrader), each with its own durable: a
    # work-queue stream allows one consumer per subject, so it is kept with the events.
    Channel(PAUSE_CLUSTER, PauseCluster, "command", "Pause (or resume) a cluster's operations: the install, rotation or upgrade running finishes its step and takes no new one until resumed.", ("cli",), ("dispatcher", "upgrader"),
            stored="events"),
    Channel("bke.v1.pause.{cluster}.changed", PauseChanged, "event", "A service recorded a pause or a resume (one event per service that runs operations).", ("dispatcher", "upgrader"), ("cli",)),
)
