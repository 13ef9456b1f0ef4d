"""How long a run's local step waits for another service's answer (the dispatcher's join or
removal, the certs service's re-issue or renewal) before it fails.

Why: those steps ask again every few seconds until the answer comes; a service that is down, or
never consumes the request, would hold the run (and the cluster's operation slot) forever. The
clock starts when the step (its current batch) first asks and is kept in the run record
(`StepRun.sent_at`, "when the current batch was sent", which no node step reads for a local step),
saved at once: a restarted upgrader keeps the same deadline, as the dispatcher keeps a join's
`agents_since`.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bke.core.upgrade.run import StepRun, UpgradeRun

from .store import UpgradeStore

__all__ = ["DEFAULT_TIMEOUT_S", "AnswerDeadline", "silent_service"]

# Longer than the dispatcher's own wait for a joining node's agents (900 s), whose reason is the
# better one, plus the join's phases.
DEFAULT_TIMEOUT_S = 1800.0


def silent_service(service: str, what: str, waited_s: float, then: str) -> str:
    """The failure's reason: which service never answered what, and what to do."""
    return (f"the {service} did not answer the {what} within {waited_s:.0f}s (BKE_UPGRADER_SERVICE_ANSWER_TIMEOUT_S): "
            f"is bke-{service.removesuffix(' service')} running and connected? Start it, then {then}")


@dataclass(frozen=True)
class AnswerDeadline:
    store: UpgradeStore
    timeout_s: float  # 0: wait forever
    now: Callable[[], float]  # epoch seconds

    async def overdue(self, run: UpgradeRun, step: StepRun) -> float | None:
        """The seconds the step has waited once past the deadline, else None. The first call of
        a batch starts the clock and saves the run record with it."""
        now = self.now()
        if not step.sent_at:
            step.sent_at = now
            await self.store.save(run)
            return None
        waited = now - step.sent_at
        return waited if 0 < self.timeout_s <= waited else None

    @staticmethod
    def next_batch(step: StepRun) -> None:
        """A batch answered: the next one's clock starts when it first asks."""
        step.sent_at = 0.0
