"""Carrying out a changed spec on a running cluster: the request and its answer.

`ApplyCluster` (a command, `bke.v1.cluster.apply`) asks the upgrader to change a running cluster
to what a changed spec describes. The upgrader places the spec, compares it with the stored plan
(`bke.core.lifecycle.diff`, the same rules as `bke apply --dry-run`) and answers once:
`ApplyAccepted` (the per-node actions in order and the steps of the run; with `dry_run` nothing
starts) or `ApplyRejected` (every refusal by rule name in `refusals`, or a malformed request's
fields in `message`). The run itself is a run of the upgrader's record: its transitions are
`UpgradeChanged` on `bke.v1.upgrade.<cluster>.changed` (the same view, `bke upgrade status`).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from .base import ErrorItem, Message, OneSpecSource, without_none
from .channel import Channel
from .drain import DrainOptions
from .changes import ChangeAction
from .upgrade import UpgradeStepView

__all__ = ["CHANNELS", "APPLY_ACCEPTED", "APPLY_CLUSTER", "APPLY_REJECTED", "MAX_APPLY_SPEC_CHARS", "ApplyAccepted",
           "ApplyCluster", "ApplyRejected"]

APPLY_CLUSTER = "bke.v1.cluster.apply"
APPLY_ACCEPTED = "bke.v1.apply.accepted"
APPLY_REJECTED = "bke.v1.apply.rejected"
# inline: under NATS' 1 MiB max_payload with the rest of the message (the CLI's INLINE_LIMIT); a
# larger spec travels as `specRef`, as an install's does (bke.contracts.cluster.InstallCluster)
MAX_APPLY_SPEC_CHARS = 900 * 1024


class ApplyCluster(OneSpecSource):
    """Change `cluster` to what the spec (the BKECluster + BKENode YAML) describes: inline in
    `spec`, or for one larger than a message, `specRef` = `<bucket>/<key>` in the JetStream object
    store (the upgrader reads it with the install's size limit)."""

    request_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:@-]+$")
    cluster: str = Field(min_length=1, max_length=63)
    spec: str | None = Field(None, min_length=1, max_length=MAX_APPLY_SPEC_CHARS)
    spec_ref: str | None = Field(None, min_length=3, max_length=512, pattern=r"^[A-Za-z0-9_-]+/[^\s]+$")
    drain_timeout_s: float = Field(300.0, gt=0, le=24 * 3600)  # a kubelet/containerd roll drains its node
    dry_run: bool = False  # answer with the actions, start nothing
    origin: Literal["cli", "bus"] = "cli"
    drain: DrainOptions | None = None  # what a drain may evict beyond kubectl's defaults

    @model_serializer(mode="wrap")
    def _added_fields_only_when_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_none(handler(self), self, ("drain",))


class ApplyAccepted(Message):
    request_id: str
    cluster: str
    stored_digest: str
    desired_digest: str
    actions: list[ChangeAction] = []  # in the order they run (empty: nothing changes)
    steps: list[UpgradeStepView] = []  # the run's steps (empty: nothing to run)
    dry_run: bool = False


class ApplyRejected(Message):
    request_id: str
    cluster: str
    message: str
    refusals: list[ErrorItem] = []  # path = the rule's name (SplitUnchanged, NotBuilt, Busy, ...)


CHANNELS: tuple[Channel, ...] = (
    Channel(APPLY_CLUSTER, ApplyCluster, "command", "Carry out a changed spec on a running cluster (rolls, labels and taints, addons), or with dryRun only answer the actions it would take; its run is followed on the upgrade's changed subject.", ("cli",), ("upgrader",)),
    Channel(APPLY_ACCEPTED, ApplyAccepted, "event", "A changed spec was accepted: the per-node actions in order and the steps of its run.", ("upgrader",), ("cli",)),
    Channel(APPLY_REJECTED, ApplyRejected, "event", "A changed spec was refused: every refusal by rule name (a change this build cannot carry out names its kind; a malformed request: its field).", ("upgrader",), ("cli",)),
)
