"""The ensure core: given the plan, what exists and "now", decide and issue. No I/O, no clock.

Steps (each a function below, top to bottom in :func:`ensure_pki`):

1. desired instances from the plan and the table;
2. :func:`decide` a verdict per instance - reuse, issue (missing) or reissue (why);
3. the manifest and the report (before issuing: see the comment there);
4. issue what is not reused (CAs first, process pool when it pays);
5. assemble the new material set.

Idempotent by construction: a second run with the first run's output reuses everything, so it
returns the same material objects and the store writes nothing.

Rules: a CA (or ``sa``) that exists is always reused - rotating a CA is a manual procedure, so
an expiring CA is only a warning and a CA with its certificate but not its key is an error, never
replaced silently. A leaf is reissued when its key is missing, its CA is new or another one, it
expires within :func:`renew_before`, or its subject, SANs, usages or key algorithm no longer match
the plan (the original never refreshed SANs).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from bke.core.plan import Plan
from .errors import CaIntegrityError
from .instances import FileRef, Instance, desired_instances, node_file_refs
from .issuance import IssueOptions, Validity, issue, paused_gc, worker_pool
from .manifest import Manifest, build_manifest
from .material import CertInfo, Material, cert_info
from .report import CertsReport, Reissued

__all__ = ["EnsureResult", "Verdict", "decide", "ensure_pki", "renew_before", "validity_of"]


@dataclass(frozen=True, slots=True)
class Verdict:
    instance: str
    action: str  # "reuse" | "issue" | "reissue"
    reason: str = ""


@dataclass(frozen=True)
class EnsureResult:
    materials: dict[str, Material]
    changed: frozenset[str]
    removed: tuple[str, ...]
    manifest: Manifest
    report: CertsReport


def renew_before(validity_days: int) -> timedelta:
    """Renewal window: 30 days, or a third of a shorter validity (a 3-day cert renews at 1 day)."""
    return min(timedelta(days=30), timedelta(days=validity_days) / 3)


def validity_of(plan: Plan, now: datetime) -> Validity:
    c = plan.spec.config.certificates
    return Validity(now=now, ca_days=c.ca_validity_days, leaf_days=c.validity_days, algorithm=c.key_algorithm)


def _leaf_reason(inst: Instance, info: CertInfo, ca: CertInfo | None, now: datetime,
                 validity: Validity) -> str:
    if ca is not None and info.aki != ca.ski:
        return "signed by another CA"
    left = info.not_after - now
    if left <= renew_before(validity.leaf_days):
        return "expired" if left.total_seconds() <= 0 else f"expires in {left.days}d"
    if info.cn != inst.cn or info.o != inst.o:
        return "subject changed"
    if set(info.dns) != set(inst.dns) or set(info.ips) != set(inst.ips):
        return "SANs changed"
    wanted = {"server": {"server"}, "client": {"client"}, "server+client": {"server", "client"}}[inst.spec.usage]
    if info.usages != wanted:
        return "usages changed"
    if info.key_algorithm != validity.algorithm:
        return f"key algorithm {info.key_algorithm} -> {validity.algorithm}"
    return ""


def decide(desired: Sequence[Instance], existing: Mapping[str, Material], now: datetime,
           validity: Validity) -> tuple[list[Verdict], list[str]]:
    """A verdict per desired instance (CA rows must come first), plus warnings."""
    verdicts: list[Verdict] = []
    warnings: list[str] = []
    new_cas: set[str] = set()
    ca_infos: dict[str, CertInfo] = {}
    for inst in desired:
        have = existing.get(inst.id)
        if inst.spec.kind in ("ca", "keypair"):
            if have is None:
                new_cas.add(inst.id)
                verdicts.append(Verdict(inst.id, "issue", "missing"))
                continue
            if have.key is None:
                raise CaIntegrityError(
                    f"{inst.id}: the certificate/public key exists but its private key is missing; restore "
                    f"the key (a new {inst.id} would invalidate everything it signed)")
            if inst.spec.kind == "ca":
                info = ca_infos[inst.id] = cert_info(have.cert)
                left = info.not_after - now
                if left <= timedelta(days=365):
                    warnings.append(f"CA {inst.id} expires in {max(left.days, 0)}d; CA rotation is manual")
            verdicts.append(Verdict(inst.id, "reuse"))
            continue
        if have is None:
            verdicts.append(Verdict(inst.id, "issue", "missing"))
        elif have.key is None:
            verdicts.append(Verdict(inst.id, "reissue", "private key missing"))
        elif inst.spec.ca in new_cas:
            verdicts.append(Verdict(inst.id, "reissue", f"CA {inst.spec.ca} is new"))
        else:
            try:
                info = cert_info(have.cert)
            except ValueError:
                verdicts.append(Verdict(inst.id, "reissue", "unreadable certificate"))
                continue
            reason = _leaf_reason(inst, info, ca_infos.get(inst.spec.ca or ""), now, validity)
            verdicts.append(Verdict(inst.id, "reissue", reason) if reason else Verdict(inst.id, "reuse"))
    return verdicts, warnings


def _changed_nodes(files: Mapping[str, Sequence[FileRef]], changed: frozenset[str],
                   previous: Manifest | None) -> list[str]:
    old = previous.files if previous is not None else {}
    out = []
    for host, refs in files.items():
        if list(old.get(host, ())) != list(refs) or any(r.instance in changed for r in refs):
            out.append(host)
    return out


def ensure_pki(plan: Plan, existing: Mapping[str, Material], now: datetime,
               options: IssueOptions | None = None, previous: Manifest | None = None) -> EnsureResult:
    """Decide and issue for ``plan``; ``previous`` (the stored manifest) refines changed_nodes."""
    options = options or IssueOptions()
    # A new cluster issues at least one certificate per node: start the worker pool right away so
    # that its workers make keys during the bookkeeping. Re-runs: issue() decides after decide().
    estimate = 0 if existing else len(plan.nodes) + 10
    with paused_gc(), worker_pool(options, estimate, plan.spec.config.certificates.key_algorithm) as pool:
        return _ensure(plan, existing, now, replace(options, pool=pool) if pool else options, previous)


def _ensure(plan: Plan, existing: Mapping[str, Material], now: datetime, options: IssueOptions | None,
            previous: Manifest | None) -> EnsureResult:
    validity = validity_of(plan, now)
    desired = desired_instances(plan)  # 1. what the plan needs
    verdicts, warnings = decide(desired, existing, now, validity)  # 2. reuse / issue / reissue
    todo_ids = {v.instance for v in verdicts if v.action != "reuse"}
    todo = [i for i in desired if i.id in todo_ids]
    cas = {i.id: existing[i.id] for i in desired if i.spec.kind == "ca" and i.id not in todo_ids}

    # 3. bookkeeping first: during it the new pool's workers make keys ahead (issuance.worker_pool)
    files = node_file_refs(plan)
    manifest = build_manifest(plan, desired, files)
    desired_ids = {i.id for i in desired}
    removed = tuple(sorted(i for i in existing if i not in desired_ids))
    changed = frozenset(todo_ids)  # issue() issues all of them or raises
    gone = [h for h in (previous.files if previous else {}) if h not in files]
    report = CertsReport.model_construct(
        cluster=plan.cluster,
        issued=[v.instance for v in verdicts if v.action == "issue"],
        reissued=[Reissued.model_construct(instance=v.instance, reason=v.reason)
                  for v in verdicts if v.action == "reissue"],
        reused=[v.instance for v in verdicts if v.action == "reuse"],
        removed=list(removed),
        changed_nodes=_changed_nodes(files, changed, previous) + gone,
        nodes=files,
        warnings=warnings,
    )
    issued = issue(todo, cas, validity, options)  # 4. the CPU-heavy part
    materials = {i.id: issued.get(i.id) or existing[i.id] for i in desired}  # 5. assemble
    return EnsureResult(materials, changed, removed, manifest, report)
