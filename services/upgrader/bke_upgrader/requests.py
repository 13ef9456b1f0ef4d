"""An upgrade request, decided: accepted (with its steps) or rejected (with every reason).

Pure, apart from the facts the caller gathered: the same path rules, checks and order as
`bke upgrade plan` (bke.core.upgrade), plus the target plan (the spec validated at the target
versions: an extraArg the new minor no longer has refuses the upgrade before anything moves).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import TypeVar

from pydantic import ValidationError

from bke.contracts.status import StatusError
from bke.contracts.upgrade import (
    RetryUpgrade,
    UpgradeAccepted,
    UpgradeCluster,
    UpgradeFinding,
    UpgradeRejected,
    UpgradeStepView,
    UpgradeVersions,
)
from bke.core.plan import Plan
from bke.core.spec.loader import loc_to_path
from bke.core.upgrade import Facts, Target, UpgradeRequestError, change_of, expand_order, resolve_target, upgrade_findings
from bke.core.upgrade.order import ExpandedStep
from bke.core.upgrade.target_plan import TargetPlanError, target_plan

__all__ = ["Decided", "decide_request", "parse_request", "parse_retry", "status_refusal", "step_views", "versions_of"]

M = TypeVar("M", UpgradeCluster, RetryUpgrade)


@dataclass(frozen=True)
class Decided:
    answer: UpgradeAccepted | UpgradeRejected
    target: Target | None = None
    new_plan: Plan | None = None
    order: tuple[ExpandedStep, ...] = ()


def parse_request(body: bytes) -> UpgradeCluster | UpgradeRejected:
    """The request, or a rejection naming each wrong field (never a dead letter: the CLI waits)."""
    return _parse(UpgradeCluster, body)


def parse_retry(body: bytes) -> RetryUpgrade | UpgradeRejected:
    """A retry of an upgrade, or a rejection naming each wrong field."""
    return _parse(RetryUpgrade, body)


def refusal_of(body: bytes, exc: ValidationError) -> tuple[str, str, str]:
    """What a rejection of bytes that are no valid request says: the request id and cluster when
    they can be read as strings ("" otherwise), and every wrong field by its path."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # json nests by recursion: `[[[...` deep must not raise
        doc = None
    rid = doc.get("requestId") if isinstance(doc, dict) else None
    cluster = doc.get("cluster") if isinstance(doc, dict) else None
    errors = [f"{loc_to_path('', tuple(e['loc'])) or 'message'}: {e['msg'].removeprefix('Value error, ')}"
              for e in exc.errors(include_url=False)]
    return (rid if isinstance(rid, str) else "", cluster if isinstance(cluster, str) else "", "; ".join(errors)[:2000])


def _parse(model: type[M], body: bytes) -> M | UpgradeRejected:
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        rid, cluster, message = refusal_of(body, exc)
        return UpgradeRejected(request_id=rid, cluster=cluster, message=message)


def status_refusal(cluster: str, status: StatusError) -> str:
    """Why a request about `cluster` is refused when the dispatcher's status answer is an error."""
    return f"cluster {cluster!r}: {status.message}" if status.reason == "NotFound" else status.message


def versions_of(p: Plan) -> UpgradeVersions:
    return UpgradeVersions(kubernetes=p.kubernetes_version.lstrip("v"), etcd=p.etcd_version.lstrip("v"),
                           containerd=p.containerd_version.lstrip("v"))


def _target_versions(t: Target) -> UpgradeVersions:
    return UpgradeVersions(kubernetes=str(t.kubernetes).lstrip("v"), etcd=str(t.etcd).lstrip("v"),
                           containerd=str(t.containerd).lstrip("v"))


def step_views(order: list[ExpandedStep] | tuple[ExpandedStep, ...], all_nodes: int) -> list[UpgradeStepView]:
    out = []
    for e in order:
        total = all_nodes if e.step == "post-checks" else e.nodes
        out.append(UpgradeStepView(name=e.step, group=e.group, total=total,
                                   batches=1 if e.step == "post-checks" else len(e.batches)))
    return out


def decide_request(req: UpgradeCluster, plan: Plan, facts: Facts) -> Decided:
    def reject(message: str, findings: list[UpgradeFinding] | None = None) -> Decided:
        return Decided(UpgradeRejected(request_id=req.request_id, cluster=req.cluster, message=message,
                                       findings=findings or []))

    try:
        target = resolve_target(plan, req.kubernetes_version, req.etcd_version, req.containerd_version,
                                tuple(req.etcd_clusters) if req.etcd_clusters is not None else None)
    except UpgradeRequestError as exc:
        return reject(str(exc))
    # kubeadm's --certificate-renewal: on unless the request turns it off (the checks say which
    # certificates expire before the upgrade could end and are not renewed by it)
    facts = replace(facts, renew_certificates=req.renew_certificates)
    report = upgrade_findings(plan, target, facts, req.ignore_checks)
    findings = [UpgradeFinding(name=f.name, kind=f.kind, message=f.message,  # type: ignore[arg-type]
                               ignored=f.name in report.ignored) for f in report.findings]
    if report.refused:
        return reject("; ".join(report.reasons()), [f for f in findings if not f.ignored and f.kind != "notice"])
    try:
        new_plan = target_plan(plan, target)
    except TargetPlanError as exc:
        return reject(f"the spec does not hold at the target versions: {exc}")
    try:
        change = replace(change_of(plan, target), certificates=req.renew_certificates)
        order = expand_order(plan, change, req.max_unavailable, report.left_out)
    except ValueError as exc:
        return reject(str(exc))
    accepted = UpgradeAccepted(
        request_id=req.request_id, cluster=req.cluster, current=versions_of(plan), target=_target_versions(target),
        findings=findings, steps=step_views(order, len(plan.nodes) - len(report.left_out)),
        left_out=list(report.left_out), dry_run=req.dry_run)
    return Decided(accepted, target, new_plan, tuple(order))
