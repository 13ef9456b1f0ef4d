"""What every builder needs to know about the cluster, computed once per render.

RenderInputs are the only values that are not in the plan: things generated once per cluster and
persisted by the caller (the CLI under DIR/.bke/, the service in Redis), so rendering stays pure.
"""
from __future__ import annotations

import functools
import ipaddress
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from bke.core.flagrules import family_of, flag_verdict
from bke.core.flagrules.gates import VersionSet
from bke.core.pki.pod_certs import names_digests
from bke.core.plan import NodePlan, Plan
from bke.core.spec.models import BKENodeSpec, Cluster
from .args import COMPONENT_FIELDS, merge_args
from .errors import MissingInputError
from .presets import ClusterFacts, Tier, preset_args, tier_for

__all__ = ["Ctx", "EtcdJoin", "RenderInputs", "VRRP_PASSWORD_RE", "generate_vrrp_password", "loopback_of", "url_host"]

# keepalived's PASS authentication uses at most 8 characters; alphanumerics keep the config
# free of quoting and comment characters.
VRRP_PASSWORD_RE = re.compile(r"^[A-Za-z0-9]{8}$")
_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789"


def generate_vrrp_password(choice: Callable[[str], str] = secrets.choice) -> str:
    """A new per-cluster VRRP password (8 characters). Call once per cluster and persist it."""
    return "".join(choice(_ALPHABET) for _ in range(8))


@dataclass(frozen=True)
class EtcdJoin:
    """A member of `etcd_cluster` that joins it while it runs, rather than bootstrapping it with
    the others. etcd's runtime reconfiguration guide
    (https://etcd.io/docs/v3.5/op-guide/runtime-configuration/#add-a-new-member): the new member
    starts with `--initial-cluster-state=existing` and an `--initial-cluster` of exactly the
    members at that moment plus itself (etcd compares it with the running cluster's member list
    and refuses to start on a mismatch). `initial_cluster` is that `name=peerURL,...` list
    (bke.core.lifecycle.etcd_members.etcd_joins derives it from the order of the adds). Only the
    join needs it: etcd uses the `--initial-*` flags to bootstrap a new member and ignores them
    when an existing member restarts (etcd's configuration flags guide), so later renders of the
    member with `new` and the full list are harmless (checked in test_etcd_members)."""

    etcd_cluster: str
    member: str
    initial_cluster: str


@dataclass(frozen=True)
class RenderInputs:
    vrrp_password: str | None = None  # required when the plan has a load balancer
    # Members that join their running etcd cluster (a changed spec's apply); none for an install,
    # whose members bootstrap together with `--initial-cluster-state=new`.
    etcd_joins: tuple[EtcdJoin, ...] = ()

    def etcd_join(self, etcd_cluster: str, member: str) -> EtcdJoin | None:
        return next((j for j in self.etcd_joins if (j.etcd_cluster, j.member) == (etcd_cluster, member)), None)


def url_host(ip: str) -> str:
    return f"[{ip}]" if ipaddress.ip_address(ip).version == 6 else ip


def loopback_of(ip: str) -> str:
    """The loopback address of the node's address family (listeners kubeadm binds locally)."""
    return "::1" if ipaddress.ip_address(ip).version == 6 else "127.0.0.1"


@dataclass(frozen=True)
class Ctx:
    plan: Plan
    versions: VersionSet
    facts: ClusterFacts
    inputs: RenderInputs
    # (node, component, problem) for flags BKE itself renders (defaults, presets) that the flag
    # table does not accept in this version: a bug in BKE's data, reported as render findings.
    flag_problems: list[tuple[str, str, str]] = field(default_factory=list, compare=False)

    @classmethod
    def build(cls, plan: Plan, versions: VersionSet, inputs: RenderInputs) -> Ctx:
        if plan.load_balancer and (inputs.vrrp_password is None or not VRRP_PASSWORD_RE.match(inputs.vrrp_password)):
            raise MissingInputError(
                f"cluster {plan.cluster}: the endpoint is a VIP, so a VRRP password (8 letters/digits, "
                "generated once per cluster with generate_vrrp_password) must be passed in RenderInputs"
            )
        facts = ClusterFacts(
            nodes=sum(1 for n in plan.nodes if n.registers),
            apiservers=len(plan.nodes_running("kube-apiserver")),
        )
        return cls(plan, versions, facts, inputs)

    @property
    def tier(self) -> Tier:
        return tier_for(self.facts.nodes)

    @property
    def config(self) -> Cluster:
        return self.plan.spec.config

    def image(self, name: str, tag: str) -> str:
        return f"{self.config.image_repo.rstrip('/')}/{name}:{tag}"

    @functools.cached_property
    def _node_specs(self) -> dict[str, BKENodeSpec]:
        return {n.spec.hostname: n.spec for n in self.plan.spec.nodes}

    def node_spec(self, hostname: str) -> BKENodeSpec:
        return self._node_specs[hostname]

    @functools.cached_property
    def _certificate_names(self) -> dict[str, dict[tuple[str, str], str]]:
        return {}

    def certificate_names(self, node: NodePlan, pod: str, group: str = "") -> str:
        """The digest of the certificate names static pod `pod` (of etcd cluster `group`) reads
        on `node` (bke.core.pki.pod_certs), worked out once per node for all its pods."""
        digests = self._certificate_names.get(node.hostname)
        if digests is None:
            digests = self._certificate_names[node.hostname] = names_digests(self.plan, node.hostname)
        return digests[(pod, group)]

    @functools.cached_property
    def _running(self) -> dict[str, list[NodePlan]]:
        out: dict[str, list[NodePlan]] = {}
        for n in self.plan.nodes:
            for c in n.components:
                out.setdefault(c, []).append(n)
        return out

    def running(self, component: str) -> list[NodePlan]:
        """Nodes that run `component`, in plan order (computed once: O(N) per render, not per node)."""
        return self._running.get(component, [])

    @functools.cached_property
    def _presets(self) -> dict[str, dict[str, str]]:
        return {c: preset_args(c, self.facts, self.versions) for c in COMPONENT_FIELDS}

    def flags(self, component: str, node: NodePlan, defaults: dict[str, str]) -> dict[str, str]:
        """defaults < presets < cluster extraArgs < node extraArgs, per flag."""
        attr, _ = COMPONENT_FIELDS[component]
        cluster_args = getattr(self.config, attr).extra_args
        node_comp = getattr(self._node_specs[node.hostname], attr)
        node_args = node_comp.extra_args if node_comp is not None else {}
        merged = merge_args(defaults, self._presets[component], cluster_args, node_args)
        fam = family_of(component)
        for name in sorted(set(defaults) | set(self._presets[component])):
            if name in cluster_args or name in node_args:
                continue  # the user's value: judged by check_extra_args, allowUnsafeFlags included
            verdict = flag_verdict(fam, name, self.versions.of(fam))
            if not verdict.ok:
                self.flag_problems.append((node.hostname, component, verdict.message))
        return merged
