"""The install's record, as the one loop (bke.adapters.operation) sees it: pure, no Redis.

Unlike the other operations' records (one JSON string), the install keeps one hash for itself
and one per phase (`state.DispatcherState`), and its nodes' commands in a hash per phase, so
that 10,000 agents' answers each count with one script (results.py) rather than a rewrite of one
record. `InstallRecord` is a pass's view of the install hash and the phases' hashes, read in one
round trip (store.py); what a pass changes of them is written by its carriers (run.py) or
queued here and written by the store's `save`.

    request_id, cluster, status, ...   the install hash's fields
    phases                             slug -> PhaseRecord, every phase of the table
    inputs                             what the renderer and certs services said
    view                               what the pass read of the plan and the world for its
                                       current phase (not stored: read again every pass)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bke.contracts.statuses import OperationStatus
from bke.core.operation.record import Ends
from bke.core.plan import Plan

from ...decide import Observed, PhaseRecord
from ...phases import Phase
from ...readiness import InputRecord

__all__ = ["InstallRecord", "PhaseView"]


@dataclass(frozen=True)
class PhaseView:
    """What a pass read for the current phase besides the record: the plan's answer to the
    phase (does it apply, which nodes) and what the phase may depend on (agents, inputs)."""

    phase: Phase
    plan: Plan  # the plan the pass read (the plan cache's object): the carriers build from it
    applies: bool
    targets: list  # the phase's NodePlans, in the plan's order (the cursor counts into it)
    seen: Observed


@dataclass(kw_only=True)
class InstallRecord(Ends):
    request_id: str
    cluster: str
    started_at: str = ""
    status: OperationStatus = OperationStatus.RUNNING
    finished_at: str = ""
    message: str = ""
    plan_digest: str = ""
    nodes_changed: bool = False  # a command went out: a corrected spec must go through apply
    # whether its end went out (`install finished`); a record that has no such field ended
    # before the end was recorded as announced, and was announced then
    announced: bool = True
    failed_phase: str = ""  # the phase it failed in ("" while it runs, or if it succeeded)
    failed_node: str = ""
    kind: str = ""  # of a failure: "invalid" (the input was refused) | "operational"
    phases: dict[str, PhaseRecord] = field(default_factory=dict)
    inputs: dict[str, InputRecord] = field(default_factory=dict)
    # not stored ------------------------------------------------------------------------
    view: PhaseView | None = field(default=None, compare=False, repr=False)
    # the current phase's fields a wait noted (its message, the agents counted), for `save`
    noted: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    # whether its end is yet to be written (set by `finish`, cleared by the store's `save`)
    end_pending: bool = field(default=False, compare=False, repr=False)

    def finish(self, status: OperationStatus, reason: str, at: str) -> None:
        super().finish(status, reason, at)
        self.end_pending, self.announced = True, False

    def current(self, table: tuple[Phase, ...]) -> Phase | None:
        """The first phase of `table` not finished yet (None: every one is)."""
        return next((p for p in table if not self.phases.get(p.slug, PhaseRecord()).status.finished), None)

    def phase(self, slug: str) -> PhaseRecord:
        return self.phases.get(slug, PhaseRecord())

    def to_json(self) -> str:  # the loop's Record protocol; the install is stored as hashes (store.py)
        raise TypeError("the install record is stored as hashes (ops/install/store.py), not as JSON")
