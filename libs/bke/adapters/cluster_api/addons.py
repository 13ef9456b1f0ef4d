"""The `addons` phase: the addon table (bke.core.spec.addons) applied in order, each tracked.

Order and sources: bootstrap RBAC (rendered; applied with super-admin.conf, everything after it
with admin.conf), kube-proxy (rendered), the CNI (calico's manifest fetched from the httpRepo,
checked, wired to the cluster by bke.core.calico, validated), CoreDNS (rendered), then the user's
folders. A built-in the spec turned off is not there; one the user replaced is read from their
folder in its slot.

Real clusters: server-side apply with the `kubernetes` client, then, for the CNI, a wait until
its DaemonSet is ready (polled, with a deadline). The lab has no apiserver: each object is
validated (kubernetes-validate, strict, for the cluster's version) and recorded as "Validated"
(bke.lab.standins.addons).

Records, one per addon in `bke:<cluster>:addons` (`order` is the table's position, so `bke
status` lists them in the order applied): status Validated | Applied | Ready. An addon recorded
done is never applied again after a restart; one recorded Applied that has something to wait
for is only waited for. On a real cluster each addon is an ApplySet of its own
(bke.core.applyset): the record names what the apply pruned (`pruned`), or says that it found
no ApplySet and wrote it (`adopted`: a first install, or objects applied before BKE kept
ApplySets; nothing pruned).
"""
from __future__ import annotations

import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Protocol

from dataclasses import dataclass, field

import yaml
from redis.asyncio import Redis

from bke.contracts.statuses import AddonStatus
from bke.core.applyset import PruneReport
from bke.core.calico import CalicoWiring, wire_calico
from bke.core.plan import Plan
from bke.core.spec.addons import AddonStep, addon_steps
from bke.adapters.state.keys.renderer import addon_manifests_key
from bke.adapters.state.keys.dispatcher import addons_key

from bke.adapters.runner import DONE, Outcome
from .manifests import cni_artefact
from .workloads import daemonset_ready, rollout_mark

__all__ = ["STALL_TIMEOUT_S", "AddonApplied", "AddonsWork", "load_addon_objects", "validate_objects"]

log = logging.getLogger("bke.addons")
# How long a DaemonSet may go without one more pod updated or available before the phase fails,
# as a Deployment's progressDeadlineSeconds: a fixed deadline on the whole rollout would fail a
# 10,000-node cluster that is still coming up at its controller-manager's API rate, while a stuck
# one (an image that cannot be pulled anywhere) still fails within minutes.
STALL_TIMEOUT_S = 600.0
POLL_S = 5.0


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


def validate_objects(plan: Plan, objects: list[dict[str, Any]]) -> None:
    """Every object strictly valid for the cluster's Kubernetes minor, else ValueError naming it."""
    import kubernetes_validate

    minor = ".".join(plan.kubernetes_version.lstrip("v").split(".")[:2])
    for i, obj in enumerate(objects):
        try:
            kubernetes_validate.validate(obj, minor, strict=True)
        except kubernetes_validate.ValidationError as exc:
            kind = obj.get("kind", "?") if isinstance(obj, dict) else "?"
            raise ValueError(f"object {i} ({kind}): {exc.message}") from exc


@dataclass(frozen=True)
class AddonApplied:
    """What an Applier did with one addon: its status, and what its ApplySet pruned."""

    status: AddonStatus
    prune: PruneReport = field(default_factory=PruneReport)

    def record(self) -> dict[str, Any]:
        """The record's fields for the prune, present only when there is something to say."""
        return {**({"pruned": list(self.prune.pruned)} if self.prune.pruned else {}),
                **({"adopted": True} if self.prune.adopted else {})}


class Applier(Protocol):
    async def apply(self, plan: Plan, name: str, objects: list[dict[str, Any]], credential: str = "admin") -> AddonApplied: ...

    async def workload(self, plan: Plan, kind: str, namespace: str, name: str) -> dict[str, Any]: ...


class ManifestSource(Protocol):
    async def fetch(self, plan: Plan, art: Any) -> bytes: ...


def _records(raw: dict) -> dict[str, dict]:
    out = {}
    for k, v in raw.items():
        try:
            out[k.decode() if isinstance(k, bytes) else k] = json.loads(v)
        except (ValueError, TypeError):
            continue  # an unreadable record: applied again (server-side apply is idempotent)
    return out


class AddonsWork:
    def __init__(self, redis: Redis, applier: Applier, now: Callable[[], datetime], manifests: ManifestSource):
        self.redis, self.applier, self.now, self.manifests = redis, applier, now, manifests

    async def _objects(self, plan: Plan, step: AddonStep, rendered: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The step's objects, ready to apply; None while the renderer's are not stored yet."""
        if step.source == "path":
            assert step.path is not None
            return load_addon_objects(Path(step.path))
        if step.source == "rendered":
            text = rendered.get(step.name)
            return None if text is None else [d for d in yaml.safe_load_all(text) if d]
        body = await self.manifests.fetch(plan, cni_artefact(plan, step.version))
        docs = [d for d in yaml.safe_load_all(body) if d]
        if not all(isinstance(d, dict) for d in docs):
            raise ValueError("the manifest holds a document that is not a Kubernetes object")
        c = plan.spec.config
        objects = wire_calico(docs,
                              CalicoWiring(c.networking.pod_subnet, c.image_repo, c.kube_proxy.mode))
        if not getattr(self.applier, "validates", False):
            validate_objects(plan, objects)  # upstream's objects, checked before any reaches the cluster
        return objects

    async def _save(self, plan: Plan, step: AddonStep, doc: dict[str, Any]) -> None:
        await self.redis.hset(addons_key(plan.cluster), step.name, json.dumps(doc))

    async def run(self, name: str, plan: Plan, rendered: dict[str, Any] | None = None,
                  only: str | None = None) -> Outcome:
        """Apply every addon of `plan` not yet done at its version. `rendered`: the rendered
        addon manifests (the upgrader passes the target version's); default the renderer's.
        `only`: that addon alone (the upgrader applies the target's `rbac` early; recorded like
        any addon, so the full run later finds it done)."""
        records = _records(await self.redis.hgetall(addons_key(plan.cluster)))
        if rendered is None:
            raw = await self.redis.hgetall(addon_manifests_key(plan.cluster))
            rendered = {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}
        for i, step in enumerate(addon_steps(plan.spec)):
            if only is not None and step.name != only:
                continue
            rec = records.get(step.name) or {}
            if rec.get("version") != step.version:
                rec = {}  # another version (an upgrade): applied again, from its own manifests
            status = rec.get("status")
            if status in (AddonStatus.VALIDATED, AddonStatus.READY) or (status == AddonStatus.APPLIED and not step.wait_for):
                continue  # done before a restart: never again
            try:
                if status != AddonStatus.APPLIED:  # 1. fetch or read, wire, validate, apply
                    objects = await self._objects(plan, step, rendered)
                    if objects is None:
                        return Outcome("wait", delay=1.0, reason=f"waiting for the rendered {step.name} manifests")
                    applied = await self.applier.apply(plan, step.name, objects, step.credential)
                    result = applied.status
                    rec = {"version": step.version, "status": result, "objects": len(objects), "order": i,
                           "at": self.now().isoformat(), **applied.record()}
                    await self._save(plan, step, rec)
                    log.info("addon %s %s%s", step.name, result,
                             f", pruned {', '.join(applied.prune.pruned)}" if applied.prune.pruned else "",
                             extra={"cluster": plan.cluster, "addon": step.name})
                    if result != AddonStatus.APPLIED or not step.wait_for:
                        continue
                assert step.wait_for is not None  # 2. wait until its workload is ready
                workload = await self.applier.workload(plan, *step.wait_for)
                ready, detail = daemonset_ready(workload)
                kind, ns, wname = step.wait_for
                if not ready:
                    mark = rollout_mark(workload)
                    if rec.get("progress") != mark:  # one more pod updated or available: the deadline moves
                        rec = {**rec, "progress": mark, "progressAt": self.now().isoformat()}
                        await self._save(plan, step, rec)
                    since = datetime.fromisoformat(rec["progressAt"])
                    stalled = (self.now() - since).total_seconds()
                    if stalled > STALL_TIMEOUT_S:
                        return Outcome("failed", reason=f"addon {step.name}: {kind} {ns}/{wname} not ready, no progress "
                                                        f"for {stalled:.0f}s: {detail}")
                    return Outcome("wait", delay=POLL_S, reason=f"addon {step.name}: {kind} {ns}/{wname}: {detail}")
                await self._save(plan, step, {**rec, "status": AddonStatus.READY, "readyAt": self.now().isoformat(), "ready": detail})
            except (OSError, ValueError, yaml.YAMLError) as exc:
                return Outcome("failed", reason=f"addon {step.name} {step.version}: {exc}")
            except (KeyError, TypeError, AttributeError) as exc:  # a manifest of the wrong shape: never a crash
                return Outcome("failed", reason=f"addon {step.name} {step.version}: malformed object "
                                                f"({type(exc).__name__}: {exc})")
        return DONE
