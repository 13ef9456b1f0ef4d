"""Upgrade decisions as pure cores: path rules, pre-checks, and the order of steps.

No I/O here: the upgrader service and `bke upgrade plan` call the same functions. The one piece
that polls a live etcd cluster, `QuorumSampler`, is bke.adapters.upgrade.quorum."""
from .checks import CHECKS, Facts, Finding, Report, upgrade_findings
from .order import ORDER, Change, ExpandedStep, Step, default_max_unavailable, expand_order, parse_max_unavailable
from .paths import ETCD_MIN_PATCH, change_of, PATH_RULES, PathRule, Target, UpgradeRequestError, path_findings, resolve_target

__all__ = [
    "CHECKS",
    "ETCD_MIN_PATCH",
    "ORDER",
    "PATH_RULES",
    "Change",
    "ExpandedStep",
    "Facts",
    "Finding",
    "PathRule",
    "Report",
    "Step",
    "Target",
    "UpgradeRequestError",
    "change_of",
    "default_max_unavailable",
    "expand_order",
    "parse_max_unavailable",
    "path_findings",
    "resolve_target",
    "upgrade_findings",
]

