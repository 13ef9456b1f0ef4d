"""What the dispatcher knows: the clusters it installs and the nodes of their plans.

A message about anything else is poison or forged and must cost nothing: 5,000 forged
heartbeats once made 5,000 Redis entries, and 1,000 forged results for a cluster that does not
exist, each retried forever, filled the result consumer's window and stalled a real install.
These checks only read (the plan cache re-reads a plan only when its digest changes) and
remember only what exists, so a flood of invented names grows nothing.
"""
from __future__ import annotations

from bke.adapters.coalesce import Coalesced
from bke.contracts.agent import CommandResult
from bke.core.plan import Plan
from bke.core.errors import TemporaryError, UnknownTarget
from bke.adapters.state import PlanCache

from .state import DispatcherState

__all__ = ["KnownTargets"]


class KnownTargets:
    def __init__(self, state: DispatcherState, plans: PlanCache):
        self.state, self.plans = state, plans
        # cluster -> its plan, read once for the messages handled in the same turn (the cache
        # still asks Redis whether the stored plan changed: one round trip a turn, not a result)
        self._plan: Coalesced[str, None, Plan] = Coalesced(self._load)
        self._clusters: set[str] = set()  # clusters with an install record (they are not forgotten mid-run)
        self._nodes: dict[str, tuple[object, frozenset[str]]] = {}  # cluster -> (plan object, hostnames)

    async def has_cluster(self, cluster: str) -> bool:
        if cluster in self._clusters:
            return True
        if await self.state.install(cluster):
            self._clusters.add(cluster)
            return True
        return False

    async def nodes(self, cluster: str) -> frozenset[str]:
        """The hostnames of the cluster's stored plan; empty if it has none."""
        try:
            plan = await self._plan(cluster, None)
        except TemporaryError:  # no plan stored for that name
            if cluster in self._clusters:
                # A cluster seen installed whose plan is gone: the store was emptied (the epoch
                # watch holds every message within a second) or is being restored. Its results
                # must wait, not be dead-lettered: a lab test lost the etcd results that arrived
                # in that second and the restored install waited for them for ever.
                raise
            return frozenset()
        cached = self._nodes.get(cluster)
        if cached is not None and cached[0] is plan:
            return cached[1]
        names = frozenset(n.hostname for n in plan.nodes)
        self._nodes[cluster] = (plan, names)
        return names

    async def _load(self, cluster: str, asked: list[None]) -> list[Plan]:
        return [await self.plans.load(cluster)] * len(asked)

    async def has_node(self, cluster: str, node: str) -> bool:
        return node in await self.nodes(cluster)

    async def check_result(self, res: CommandResult) -> None:
        """UnknownTarget unless the result is about an installed cluster and a node of its plan."""
        if not await self.has_cluster(res.cluster):
            raise UnknownTarget(f"result {res.command_id!r} for unknown cluster {res.cluster!r}")
        if not await self.has_node(res.cluster, res.node):
            raise UnknownTarget(f"result {res.command_id!r} from node {res.node!r}, which is not in the plan of {res.cluster!r}")
        if not res.command_id.startswith(f"{res.cluster}/"):
            raise UnknownTarget(f"result {res.command_id!r} names another cluster than {res.cluster!r}")
