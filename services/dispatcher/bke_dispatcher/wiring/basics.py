"""What every part of the dispatcher's wiring is given: the service, its settings, its store and
the records over it, its command signing, the publishers that the dashboard watches, its pause
flags and its clock."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from redis.asyncio import Redis

from bke.adapters.bus.service import Service, make_service
from bke.adapters.operation import Publish
from bke.adapters.state import PlanCache
from bke.adapters.state.client import redis_client
from bke.adapters.state.command_signing import CommandSigning
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.adapters.state.pause import PauseFlags
from bke.core.secrets import box_for

from ..dashboard import RecentEvents
from ..settings import DispatcherSettings
from ..state import DispatcherState

__all__ = ["Basics", "basics"]


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Basics:
    svc: Service
    settings: DispatcherSettings
    redis: Redis
    state: DispatcherState
    plans: PlanCache
    files: RedisNodeFiles
    signing: CommandSigning
    events: RecentEvents  # the dashboard's latest events: what this dispatcher publishes about installs
    publish: Publish  # svc.publish, recorded among the recent events
    notify: Publish  # svc.notify, likewise
    pause: PauseFlags
    now: Callable[[], datetime]


def basics(settings: DispatcherSettings) -> Basics:
    svc = make_service("dispatcher", settings)
    redis = redis_client(settings.store)
    events = RecentEvents()
    return Basics(
        svc=svc, settings=settings, redis=redis, state=DispatcherState(redis), plans=PlanCache(redis),
        files=RedisNodeFiles(redis),
        # every command is signed with the deployment's key (made at deployment, or here, SET NX)
        signing=CommandSigning(redis, lambda: box_for("signing")),
        events=events, publish=events.watch(svc.publish), notify=events.watch(svc.notify),
        pause=PauseFlags(redis, "dispatcher"), now=_now)
