"""What a run of the upgrade record reads, writes and talks to, in four groups: app.py wires the
real ones, tests give stand-ins, and `operation.Upgrades` hands them to every part of a run.

    Records      the stored state: the run's record and the agents' answers, the cluster's plan
                 (cached, and stored by compare-and-swap at the end), the live facts a request
                 is checked on
    Commands     what a node step's commands are built from and sent through
    ClusterApi   what a local step does through the cluster's API: drains, addons, labels
    RunSettings  this replica's lease, its clock and the run's deadlines
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from bke.adapters.bus.node_commands import SendCommands
from bke.adapters.state import PlanCache, RedisPlanStore
from bke.adapters.state.command_signing import Prefetch
from bke.contracts.agent import AgentCommand
from bke.core.plan import Plan
from bke.adapters.bus.handler import Publish

from .agent_release import ReleaseSource
from .drain import Drainer
from .facts import LiveFacts
from .renders import Renders
from .store import UpgradeStore

__all__ = ["Addons", "Checksums", "ClusterApi", "Commands", "Labels", "Publish", "Records", "RunSettings", "Sign",
           "SnapshotSetup"]

# a command -> its signed body (bke.adapters.state.command_signing.CommandSigning.sign_bytes): the body,
# not the signed model, so that its canonical bytes are written once per command
Sign = Callable[[AgentCommand], Awaitable[bytes]]


class Checksums(Protocol):
    async def for_plan(self, plan: Plan) -> dict[str, str]: ...


class Addons(Protocol):
    async def apply(self, old: Plan, new: Plan, rendered: dict[str, str], only: str | None = None) -> str:
        """"" when every addon of the new plan (or the one named `only`) is applied (and ready),
        else why not."""


class Labels(Protocol):
    async def apply(self, plan: Plan) -> str:
        """"" when every registered node carries the plan's labels and taints, else why not."""


class SnapshotSetup(Protocol):
    async def recipient(self) -> str:
        """The public half of the deployment's snapshot key (base64), once the store exists."""


@dataclass
class Records:
    store: UpgradeStore
    plans: PlanCache
    plan_store: RedisPlanStore
    facts: LiveFacts


@dataclass
class Commands:
    """`send`: the node commands of a batch, to the dispatcher, which signs and sends them (the
    service's way, bke.contracts.node_commands). Without it (tests that play the agents), each
    command is signed with `sign` and published to its node here, as the dispatcher would."""

    publish: Publish
    sign: Sign | None
    renders: Renders
    checksums: Checksums
    snapshots: SnapshotSetup
    release: ReleaseSource | None = None  # the agent release the agents step installs (None: version check only)
    prefetch: Prefetch | None = None  # a batch's command bindings, read in one round trip
    send: SendCommands | None = None


@dataclass
class ClusterApi:
    drainer: Drainer
    addons: Addons
    labels: Labels | None = None  # the labels step of a changed spec's run (bke.core.lifecycle.apply_run)


@dataclass(frozen=True)
class RunSettings:
    owner: str  # this replica, in the cluster's lease
    lease_ms: int
    now: Callable[[], datetime]
    # a node silent this long after its batch was sent fails the step (a dead agent)
    answer_deadline_s: float = 1800.0
    component_timeout_s: float = 180.0  # how long a replaced static pod has to answer healthy
