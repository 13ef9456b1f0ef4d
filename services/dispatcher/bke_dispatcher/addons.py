"""The `addons` phase: built-in kube-proxy and CoreDNS (rendered), then the user's addons
(`addons[]{name, version, path}`, a folder of manifests), applied in order, tracked per addon.

Real clusters: server-side apply with the `kubernetes` client. The lab has no apiserver, so
there each object is validated (kubernetes-validate, strict, for the cluster's version) and
recorded instead. Either way the record per addon lives in `bke:<cluster>:addons`.
"""
from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Protocol

import yaml
from redis.asyncio import Redis

from bke.plan import Plan
from bke.state.keys import addon_manifests_key, addons_key

from .engine import DONE, Outcome

__all__ = ["AddonsWork", "LabApplier", "load_addon_objects"]

log = logging.getLogger("bke.dispatcher.addons")
BUILT_IN = ("kube-proxy", "coredns")


def load_addon_objects(folder: Path) -> list[dict[str, Any]]:
    """Every object of every *.yaml / *.yml / *.json file in the folder, in file-name order."""
    if not folder.is_dir():
        raise FileNotFoundError(f"addon folder {folder} does not exist")
    objs: list[dict[str, Any]] = []
    for f in sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml", ".json")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                objs.append(doc)
    return objs


class Applier(Protocol):
    async def apply(self, plan: Plan, name: str, objects: list[dict[str, Any]]) -> str: ...


class LabApplier:
    """Validate every object strictly for the cluster's Kubernetes version; apply nothing."""

    async def apply(self, plan: Plan, name: str, objects: list[dict[str, Any]]) -> str:
        import kubernetes_validate

        minor = ".".join(plan.kubernetes_version.lstrip("v").split(".")[:2])
        for i, obj in enumerate(objects):
            try:
                kubernetes_validate.validate(obj, minor, strict=True)
            except kubernetes_validate.ValidationError as exc:
                kind = obj.get("kind", "?") if isinstance(obj, dict) else "?"
                raise ValueError(f"object {i} ({kind}): {exc.message}") from exc
        return "Validated"


class AddonsWork:
    def __init__(self, redis: Redis, applier: Applier, now: Callable[[], datetime]):
        self.redis, self.applier, self.now = redis, applier, now

    async def run(self, name: str, plan: Plan) -> Outcome:
        key = addons_key(plan.cluster)
        done = {k.decode() if isinstance(k, bytes) else k for k in await self.redis.hkeys(key)}
        rendered = await self.redis.hgetall(addon_manifests_key(plan.cluster))
        rendered = {(k.decode() if isinstance(k, bytes) else k): v for k, v in rendered.items()}
        for addon in plan.spec.cluster.spec.cluster_config.addons:
            if addon.name in done:
                continue  # applied before a restart: never again
            try:
                if addon.path:
                    objects = load_addon_objects(Path(addon.path))
                elif addon.name in rendered:
                    objects = [d for d in yaml.safe_load_all(rendered[addon.name]) if d]
                elif addon.name in BUILT_IN:
                    return Outcome("wait", delay=1.0, reason=f"waiting for the rendered {addon.name} manifests")
                else:
                    raise ValueError(f"addon {addon.name!r} is not built in and has no 'path' folder of manifests")
                result = await self.applier.apply(plan, addon.name, objects)
            except (OSError, ValueError, yaml.YAMLError) as exc:
                return Outcome("failed", reason=f"addon {addon.name} {addon.version}: {exc}")
            doc = {"version": addon.version, "status": result, "objects": len(objects), "at": self.now().isoformat()}
            await self.redis.hset(key, addon.name, json.dumps(doc))
            log.info("addon %s %s", addon.name, result, extra={"cluster": plan.cluster, "addon": addon.name})
        return DONE
