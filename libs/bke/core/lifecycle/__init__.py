"""A running cluster's life cycle after install: what applying a changed spec means.

`diff.diff_plans(current, desired)` is the pure decision: what differs between the stored plan
and the one the new spec places, which of it is refused and why, and the per-node actions in the
order they would run. `bke apply --dry-run` and the planner's dry-run answer print it.
"""
from .diff import Action, ClusterDiff, EtcdChange, Refusal, diff_plans

__all__ = ["Action", "ClusterDiff", "EtcdChange", "Refusal", "diff_plans"]
